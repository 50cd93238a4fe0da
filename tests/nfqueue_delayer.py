"""Delay every packet of an NFQUEUE queue by a fixed time: ``tc netem delay`` for a kernel without
``sch_netem`` (this machine's has none; the partition suite's "loss + delay" fault uses it).

Run it where the iptables rule is (the router namespace of tests/partition_lab.py)::

    iptables -I FORWARD -j NFQUEUE --queue-num 7 --queue-bypass
    python tests/nfqueue_delayer.py --queue 7 --delay 0.2

Each packet the kernel queues is accepted ``--delay`` seconds after it arrived, in arrival order (the
delay is constant, so a FIFO is the schedule). It speaks nfnetlink_queue over a raw netlink socket
(no library needed): BIND the queue, ask for packet metadata only (COPY_META: the id is all a
verdict needs), fail open when the queue is full (the kernel accepts instead of dropping), then read
packets and send NF_ACCEPT verdicts when they are due. ``--queue-bypass`` on the rule makes the kernel
accept packets while no program listens, so ending this one never blackholes the network. SIGTERM
(or SIGINT) ends it; packets still held are released first.
"""

from __future__ import annotations

import argparse
import collections
import errno
import select
import signal
import socket
import struct
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
NFQNL_MSG_PACKET, NFQNL_MSG_VERDICT, NFQNL_MSG_CONFIG = 0, 1, 2
NFQNL_CFG_CMD_BIND = 1
NFQA_CFG_CMD, NFQA_CFG_PARAMS, NFQA_CFG_QUEUE_MAXLEN, NFQA_CFG_MASK, NFQA_CFG_FLAGS = 1, 2, 3, 4, 5
NFQA_CFG_F_FAIL_OPEN = 1
NFQNL_COPY_META = 1
NFQA_PACKET_HDR, NFQA_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
NLMSG_HEADER = struct.Struct("=IHHII")   # length, type, flags, sequence, port id
QUEUE_LENGTH = 65536


def _attribute(kind: int, payload: bytes) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, kind) + payload + b"\0" * (-length % 4)


class NfQueue:
    """One bound nfnetlink queue: packets in, verdicts out."""

    def __init__(self, queue: int) -> None:
        self.queue = queue
        # the default receive buffer holds ~2,000 packets' metadata; should it overflow, fail-open
        # has the kernel accept the packets it could not hand us (undelayed, not dropped)
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self.sock.bind((0, 0))
        self._sequence = 0
        self._request(NFQNL_MSG_CONFIG, _attribute(NFQA_CFG_CMD, struct.pack("!BxH", NFQNL_CFG_CMD_BIND,
                                                                              socket.AF_INET)))
        self._request(NFQNL_MSG_CONFIG, _attribute(NFQA_CFG_PARAMS, struct.pack("!IB", 0xFFFF, NFQNL_COPY_META))
                      + _attribute(NFQA_CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_LENGTH))
                      + _attribute(NFQA_CFG_MASK, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN))
                      + _attribute(NFQA_CFG_FLAGS, struct.pack("!I", NFQA_CFG_F_FAIL_OPEN)))

    def _message(self, kind: int, attributes: bytes, flags: int) -> bytes:
        self._sequence += 1
        body = struct.pack("=BB", socket.AF_UNSPEC, 0) + struct.pack("!H", self.queue) + attributes
        return NLMSG_HEADER.pack(NLMSG_HEADER.size + len(body), (NFNL_SUBSYS_QUEUE << 8) | kind, flags,
                                 self._sequence, 0) + body

    def _request(self, kind: int, attributes: bytes) -> None:
        """Send a configuration message and wait for its acknowledgement (an error raises)."""
        self.sock.send(self._message(kind, attributes, NLM_F_REQUEST | NLM_F_ACK))
        while True:
            data = self.sock.recv(65536)
            for kind_, payload in _messages(data):
                if kind_ == NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", payload)
                    if code:
                        raise OSError(-code, f"nfnetlink_queue configuration refused: {errno.errorcode.get(-code)}")
                    return

    def packets(self) -> list[int]:
        """The ids of the packets waiting on the socket (reads what is there; [] if nothing)."""
        try:
            data = self.sock.recv(1 << 20, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return []
        except OSError as exc:   # ENOBUFS: the kernel dropped some for us (fail-open accepts them)
            if exc.errno == errno.ENOBUFS:
                return []
            raise
        ids = []
        for kind, payload in _messages(data):
            if kind != (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET:
                continue
            offset = 4   # the nfgenmsg
            while offset + 4 <= len(payload):
                length, attribute = struct.unpack_from("=HH", payload, offset)
                if length < 4:
                    break
                if attribute & 0x7FFF == NFQA_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", payload, offset + 4)[0])
                    break
                offset += (length + 3) & ~3
        return ids

    def accept(self, packet_id: int) -> None:
        self.sock.send(self._message(NFQNL_MSG_VERDICT,
                                     _attribute(NFQA_VERDICT_HDR, struct.pack("!II", NF_ACCEPT, packet_id)),
                                     NLM_F_REQUEST))


def _messages(data: bytes):
    """(type, payload) of each netlink message in ``data``."""
    offset = 0
    while offset + NLMSG_HEADER.size <= len(data):
        length, kind, _, _, _ = NLMSG_HEADER.unpack_from(data, offset)
        if length < NLMSG_HEADER.size:
            return
        yield kind, data[offset + NLMSG_HEADER.size:offset + length]
        offset += (length + 3) & ~3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queue", type=int, required=True)
    parser.add_argument("--delay", type=float, required=True, help="seconds each packet is held")
    args = parser.parse_args()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    queue = NfQueue(args.queue)
    held: collections.deque[tuple[float, int]] = collections.deque()
    print(f"delaying queue {args.queue} by {args.delay}s", flush=True)
    while not stopping:
        now = time.monotonic()
        while held and held[0][0] <= now:
            queue.accept(held.popleft()[1])
        timeout = max(0.0, held[0][0] - now) if held else 0.5
        try:
            readable, _, _ = select.select([queue.sock], [], [], timeout)
        except InterruptedError:
            continue
        if readable:
            arrived = time.monotonic() + args.delay
            held.extend((arrived, packet_id) for packet_id in queue.packets())
    for _, packet_id in held:
        queue.accept(packet_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
