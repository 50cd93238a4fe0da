"""Which process holds a TCP connection's client end, from the kernel's
tables (mesoslike.agent.connection_owner): the v1 executor API's way of
knowing a call comes from inside an executor's container."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from mesoslike.agent.connection_owner import diag_inode, holder_of_connection, socket_inode

pytestmark = pytest.mark.timeout(60)

HEADING = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"


def line(local: str, remote: str, state: str, inode: int) -> str:
    return f"   0: {local} {remote} {state} 00000000:00000000 00:00000000 00000000     0        0 {inode} 1 0"


def test_a_table_line_is_matched_by_both_ends_and_only_when_established():
    table = [HEADING,
             line("0100007F:1F90", "00000000:0000", "0A", 11),           # 127.0.0.1:8080 listening
             line("0100007F:C350", "0100007F:1F90", "06", 12),           # 127.0.0.1:50000 -> :8080, TIME_WAIT
             line("0100007F:C351", "0100007F:1F90", "01", 13),           # 127.0.0.1:50001 -> :8080
             line("0100007F:1F90", "0100007F:C351", "01", 14)]           # the server's end of it
    assert socket_inode(table, ("127.0.0.1", 50001), ("127.0.0.1", 8080)) == 13
    assert socket_inode(table, ("127.0.0.1", 50000), ("127.0.0.1", 8080)) is None
    assert socket_inode(table, ("127.0.0.1", 50001), ("127.0.0.1", 8081)) is None
    assert socket_inode(table, ("not an address", 1), ("127.0.0.1", 8080)) is None
    # tcp6: ::1, and an IPv4-mapped peer (a dual-stack server's view of an IPv4 client)
    six = [HEADING,
           line("00000000000000000000000001000000:C352", "00000000000000000000000001000000:1F90", "01", 21),
           line("0000000000000000FFFF00000100007F:C353", "0000000000000000FFFF00000100007F:1F90", "01", 22)]
    assert socket_inode(six, ("::1", 50002), ("::1", 8080)) == 21
    assert socket_inode(six, ("::ffff:127.0.0.1", 50003), ("127.0.0.1", 8080)) == 22
    assert socket_inode(["garbage", line("zz:1", "0100007F:1F90", "01", 5)], ("127.0.0.1", 1),
                        ("127.0.0.1", 8080)) is None


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_the_process_holding_a_real_connection_is_found_among_the_candidates_only(family, host):
    with socket.create_server((host, 0), family=family) as server:
        client = socket.socket(family)
        client.connect(server.getsockname()[:2])
        accepted, peer = server.accept()
        with client, accepted:
            ends = peer[:2], accepted.getsockname()[:2]
            assert diag_inode(*ends) == os.fstat(client.fileno()).st_ino
            assert holder_of_connection(*ends, [os.getpid()]) == os.getpid()
            other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
            try:
                assert holder_of_connection(*ends, [other.pid]) is None   # another process: not it
            finally:
                other.kill()
                other.wait()
            assert holder_of_connection(*ends, []) is None


def test_a_child_given_the_socket_holds_it_too():
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.socket()
        client.connect(server.getsockname())
        accepted, peer = server.accept()
        child = subprocess.Popen([sys.executable, "-c", "import sys, time; sys.stdin.read()"],
                                 stdin=subprocess.PIPE, pass_fds=[client.fileno()])
        try:
            client.close()   # only the child holds it now
            assert holder_of_connection(peer[:2], accepted.getsockname()[:2], [os.getpid(), child.pid]) == child.pid
        finally:
            child.communicate(b"")
            accepted.close()
