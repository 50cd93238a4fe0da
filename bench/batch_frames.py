#!/usr/bin/env python3
"""CPU an item of a batch frame by the items a frame carries: STATUS_UPDATES
of ``--items`` status updates each encoded, sent by a transport ``Client``
over TCP on 127.0.0.1, received by a ``Server`` and decoded, in one process
(its CPU, ZeroMQ's I/O threads included, over ``--total`` updates a size;
sizes interleaved, ``--rounds`` times). Why senders put at most
``mesoslike.wire.batching.SEND_BATCH`` messages in a frame
(docs/performance.rst, "Stop 14: the control plane (ctl29g)"):

    python bench/batch_frames.py --out bench/results/batch-frames-ctl29g.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run as a script from a checkout

from mesoslike.transport import Client, Server  # noqa: E402
from mesoslike.wire import TaskStatus  # noqa: E402
from mesoslike.wire import messages as m  # noqa: E402
from mesoslike.wire.codec import Codec  # noqa: E402


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(sizes: list[int], total: int, rounds: int) -> dict:
    codec = Codec(m.SCHEMA, max_message_size=16 << 20)
    updates = [m.StatusUpdate("f-123-456", TaskStatus(
        task_id=f"bench0-{i}", state="TASK_RUNNING", agent_id="a-1-2-3-S0", framework_id="f-123-456",
        uuid=str(uuid.uuid4()), timestamp=1.7e9, source="SOURCE_EXECUTOR")) for i in range(max(sizes))]
    server = Server("tcp://127.0.0.1:0", codec=codec)
    client = Client(server.address, codec=codec)
    results: dict[int, list[float]] = {size: [] for size in sizes}
    frame_bytes = {size: len(codec.encode(m.StatusUpdates(updates[:size]))) for size in sizes}
    try:
        for _ in range(rounds):
            for size in sizes:
                batches = [m.StatusUpdates(updates[i:i + size]) for i in range(0, len(updates), size)]
                batches = [batch for batch in batches if len(batch.updates) == size]
                done = 0
                began = cpu_seconds()
                while done < total:
                    for batch in batches:
                        client.send_frame(codec.encode(batch))
                    got = 0
                    while got < len(batches):
                        server.wait(5.0)
                        for _, frame in server.receive_frames():
                            assert isinstance(frame, bytes)
                            codec.decode(frame)
                            got += 1
                    done += size * len(batches)
                results[size].append(round(1e6 * (cpu_seconds() - began) / done, 3))
    finally:
        client.close()
        server.close()
    return {"sizes": {str(size): {"frame_bytes": frame_bytes[size], "cpu_us_per_item": results[size],
                                  "median": sorted(results[size])[len(results[size]) // 2]} for size in sizes},
            "total_per_size_and_round": total, "loadavg": [round(x, 2) for x in os.getloadavg()]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,500,334,250,200,100", help="items a frame, comma-separated")
    parser.add_argument("--total", type=int, default=200_000, help="updates a size and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args()
    started = time.time()
    result = measure([int(size) for size in args.sizes.split(",")], args.total, args.rounds)
    result["command"] = "python bench/batch_frames.py " + " ".join(sys.argv[1:])
    result["wall_s"] = round(time.time() - started, 1)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
