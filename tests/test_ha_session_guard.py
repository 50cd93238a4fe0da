"""The session guard (mesoslike.ha.session_guard, docs/ha.rst): a dead
contender's ZooKeeper session is closed at once by its guard process, so a
standby leads without waiting out the session timeout; a clean stop, or a
frozen contender, leaves ZooKeeper to decide as before.

Real parts: a real ZooKeeper server, contenders and masters in processes of
their own (started in their own session and killed by process group, as
``bench/failover.py`` and an operator's Ctrl-C do), the guard a real process.
The sessions are long (30 s) where what is shown is that the guard, not the
timeout, ended them: the waits give up well before. The guard's decoder of
the master's records gets hostile bytes (hypothesis).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from e2e_helpers import REPO, RecordingScheduler, child_env, free_port
from mesoslike.ha.session_guard import (MAX_PAYLOAD, Bye, Malformed, RecordReader, SessionRecord, encode_bye,
                                        encode_session)
from mesoslike.ha.url import ZkUrl
from test_e2e_ha import group_url, make_cluster  # noqa: F401 (a fixture)
from waiting import wait_until
from zk_helpers import zookeeper, zookeeper_server  # noqa: F401 (fixtures)

pytestmark = pytest.mark.timeout(120)

#: long enough that only the guard can end a session within the tests' waits
LONG_SESSION = 30.0
#: the waits that the guard must beat (well under LONG_SESSION)
GUARD_WAIT = 20.0

#: a contender in a process of its own: prints its znode and session id, then
#: waits (or, with "stop-on-stdin", stops cleanly at a line on stdin)
CONTENDER = """
import sys, threading
from mesoslike.ha.url import ZkUrl
from mesoslike.ha.zookeeper import MasterContender
url, timeout, guard, mode = ZkUrl.parse(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "on", sys.argv[4]
contender = MasterContender(url, {"address": "tcp://127.0.0.1:1"}, on_elected=lambda: None,
                            on_demoted=lambda reason: None, session_timeout=timeout, session_guard=guard)
contender.start()
print(contender.fence(), contender.client.client_id[0], flush=True)
if mode == "stop-on-stdin":
    sys.stdin.readline()
    contender.stop()
    print("stopped", flush=True)
else:
    threading.Event().wait()
"""


# ----------------------------------------------------------------- the decoder (pure)
RECORD = SessionRecord(hosts="127.0.0.1:2181,127.0.0.1:2182", session_id=0x1000A2B3C4D5E6F, password=bytes(range(16)),
                       timeout=5.0, auth=("masters", "secret"))

records = st.builds(SessionRecord, hosts=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                                                 max_size=100),
                    session_id=st.integers(1, 2 ** 64 - 1), password=st.binary(min_size=1, max_size=64),
                    timeout=st.floats(0.001, 3600.0),
                    auth=st.none() | st.tuples(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20)))


def feed_in_pieces(reader: RecordReader, data: bytes, cuts: list[int]) -> list:
    out: list = []
    start = 0
    for cut in sorted({c % (len(data) + 1) for c in cuts}) + [len(data)]:
        out += reader.feed(data[start:cut])
        start = cut
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(records | st.just(Bye()), max_size=6), st.lists(st.integers(0, 10 ** 6), max_size=8))
def test_records_come_out_whole_however_the_pipe_cuts_them(sent, cuts):
    data = b"".join(encode_bye() if isinstance(r, Bye) else encode_session(r) for r in sent)
    assert feed_in_pieces(RecordReader(), data, cuts) == sent


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=3 * MAX_PAYLOAD), st.lists(st.integers(0, 10 ** 6), max_size=8))
def test_hostile_bytes_never_crash_the_reader_and_it_keeps_at_most_one_record(data, cuts):
    reader = RecordReader()
    for item in feed_in_pieces(reader, data, cuts):
        assert isinstance(item, (SessionRecord, Bye, Malformed))
    assert len(reader._buffer) <= 8 + MAX_PAYLOAD


_NO_MAGIC = st.binary(max_size=200).map(lambda b: b.replace(b"M", b"m"))   # garbage that cannot start a record


@settings(max_examples=300, deadline=None)
@given(_NO_MAGIC, _NO_MAGIC, st.lists(st.integers(0, 10 ** 6), max_size=6))
def test_garbage_and_malformed_records_are_skipped_and_what_follows_is_read(before, between, cuts):
    bad_payload = b'{"hosts": "h:1", "session_id": -1, "password": "00", "timeout": 1, "auth": null}'
    bad_version = b"MLSG\x02\x01\x00\x02{}"
    bad_session = b"MLSG\x01\x01" + len(bad_payload).to_bytes(2, "big") + bad_payload
    huge = b"MLSG\x01\x01\xff\xff"
    data = before + bad_version + encode_session(RECORD) + between + bad_session + huge + encode_bye()
    out = feed_in_pieces(RecordReader(), data, cuts)
    assert [r for r in out if not isinstance(r, Malformed)] == [RECORD, Bye()]
    reasons = " ".join(r.reason for r in out if isinstance(r, Malformed))
    assert "version 2" in reasons and "bad session id" in reasons and "length 65535" in reasons


def test_a_record_never_shows_its_password():
    assert "secret" not in repr(RECORD) and bytes(range(16)).hex() not in repr(RECORD)


def test_a_record_that_cannot_be_read_back_is_refused_when_encoded():
    with pytest.raises(ValueError):
        encode_session(SessionRecord(hosts="", session_id=1, password=b"x", timeout=1.0))


# ----------------------------------------------------------------- processes
def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a reparented guard may wait for a reaper)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def guards_of(master_pid: int) -> list[int]:
    """The pids of the session guards started by ``master_pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mesoslike.ha.session_guard" in argv and str(master_pid).encode() in argv and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


class Contender:
    """A CONTENDER process in its own session; its output in a log file."""

    def __init__(self, tmp_path: Path, name: str, url: str, timeout: float, guard: bool,
                 mode: str = "wait") -> None:
        self.log = tmp_path / f"{name}.log"
        self.popen = subprocess.Popen([sys.executable, "-c", CONTENDER, url, str(timeout), "on" if guard else "off",
                                       mode], cwd=REPO, env=child_env(), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self.log.open("wb"), start_new_session=True,
                                      text=True)
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline().split()
        assert len(line) == 2, f"{name} did not start: {self.log.read_text()}"
        self.znode, self.session = line[0], int(line[1])
        self.guards = wait_until(lambda: guards_of(self.popen.pid), 10, f"{name}'s guard to start") if guard else []

    def signal_group(self, signum: int) -> None:
        os.killpg(self.popen.pid, signum)

    def output(self) -> str:
        return self.log.read_text()

    def close(self) -> None:
        for pid in [*self.guards, self.popen.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait(10)


@pytest.fixture
def contenders(tmp_path):
    started: list[Contender] = []

    def start(*args, **kwargs) -> Contender:
        contender = Contender(tmp_path, f"contender{len(started)}", *args, **kwargs)
        started.append(contender)
        return contender
    try:
        yield start
    finally:
        for contender in started:
            contender.close()


@pytest.fixture
def observer(zookeeper):
    from mesoslike.ha.zookeeper import connect
    client = connect(ZkUrl.parse(zookeeper.url("/mesoslike-e2e")), session_timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def owner(client, znode: str) -> int | None:
    """The session owning ``znode`` now (None: gone)."""
    stat = client.exists(znode)
    return None if stat is None else stat.ephemeralOwner


def test_a_killed_contenders_session_ends_at_once_with_its_guard_and_lingers_without(zookeeper, contenders, observer):
    url = group_url(zookeeper, "guard-kill")
    unguarded = contenders(url, LONG_SESSION, guard=False)
    guarded = contenders(url, LONG_SESSION, guard=True)
    assert unguarded.guards == [] and guards_of(unguarded.popen.pid) == []
    assert owner(observer, guarded.znode) == guarded.session
    (guard,) = guarded.guards

    # kill -9 of both process groups at once: the guard, in a session of its own, survives it
    unguarded.signal_group(signal.SIGKILL)
    guarded.signal_group(signal.SIGKILL)
    wait_until(lambda: owner(observer, guarded.znode) is None, GUARD_WAIT,
               "the guard to close the dead contender's session (its znode gone)")
    # the same kill without a guard: that session lives on until its timeout (it was killed first)
    assert owner(observer, unguarded.znode) == unguarded.session
    wait_until(lambda: not alive(guard), GUARD_WAIT, "the guard to exit")
    assert "its ZooKeeper session 0x%x: closed" % guarded.session in guarded.output()


def test_a_clean_stop_says_bye_and_the_guard_exits_without_touching_zookeeper(zookeeper, contenders, observer):
    contender = contenders(group_url(zookeeper, "guard-bye"), LONG_SESSION, guard=True, mode="stop-on-stdin")
    (guard,) = contender.guards
    assert contender.popen.stdin is not None and contender.popen.stdout is not None
    contender.popen.stdin.write("stop\n")
    contender.popen.stdin.flush()
    assert contender.popen.stdout.readline().strip() == "stopped"
    assert not alive(guard)   # reaped by the contender's stop (bye), before it said "stopped"
    assert owner(observer, contender.znode) is None   # the contender's own stop removed it
    assert contender.popen.wait(10) == 0
    assert "session guard" not in contender.output()


def test_a_frozen_contender_is_left_to_the_session_timeout_and_guarded_again_after(zookeeper, contenders, observer):
    url = group_url(zookeeper, "guard-freeze")
    contender = contenders(url, 4.0, guard=True)
    (guard,) = contender.guards
    contender.signal_group(signal.SIGSTOP)   # a frozen master is not dead: the guard must not end its session
    wait_until(lambda: owner(observer, contender.znode) is None, GUARD_WAIT, "ZooKeeper to expire the frozen session")
    assert alive(guard) and "session guard" not in contender.output()

    # resumed, it rejoins with a new session, which its guard is told of and closes when it dies
    contender.signal_group(signal.SIGCONT)
    path = ZkUrl.parse(url).path

    def rejoined() -> tuple[str, int] | None:
        for child in observer.get_children(path):
            stat = observer.exists(f"{path}/{child}")
            if stat is not None and stat.ephemeralOwner not in (0, contender.session):
                return f"{path}/{child}", stat.ephemeralOwner
        return None
    znode, session = wait_until(rejoined, GUARD_WAIT, "the resumed contender to rejoin with a new session")
    contender.signal_group(signal.SIGKILL)
    wait_until(lambda: not alive(guard), GUARD_WAIT, "the guard to exit")
    assert owner(observer, znode) is None
    assert "its ZooKeeper session 0x%x: closed" % session in contender.output()


GUARD_ONLY = """
import sys, threading
from mesoslike.ha.session_guard import SessionGuard
guard = SessionGuard(sys.argv[1], float(sys.argv[2]))
guard.start()
guard.tell((0x1234, bytes(16)))
print(guard.pid, flush=True)
threading.Event().wait()
"""


def test_the_guard_of_a_dead_master_gives_up_on_an_unreachable_zookeeper_within_its_bound(tmp_path):
    log = tmp_path / "guard.log"
    master = subprocess.Popen([sys.executable, "-c", GUARD_ONLY, f"127.0.0.1:{free_port()}", "2"], cwd=REPO,
                              env=child_env(), stdout=subprocess.PIPE, stderr=log.open("wb"), text=True,
                              start_new_session=True)
    assert master.stdout is not None
    guard = int(master.stdout.readline())
    try:
        os.killpg(master.pid, signal.SIGKILL)
        master.wait(10)
        # the bound: 2 s to connect, kazoo's close; never the whole time of an outage
        wait_until(lambda: not alive(guard), 15, "the guard to give up and exit")
        assert "session 0x1234: ZooKeeper did not answer within 2 s" in log.read_text()
    finally:
        if alive(guard):
            os.kill(guard, signal.SIGKILL)


# ----------------------------------------------------------------- masters
def test_a_killed_leading_master_is_replaced_through_its_guard_before_its_session_times_out(zookeeper, make_cluster):
    cluster = make_cluster(group_url(zookeeper, "guard-masters"))
    cluster.master_args = (*cluster.master_args, "--zk-session-timeout", str(LONG_SESSION))
    masters = cluster.start_masters(2)
    first = cluster.wait_for_leader()
    cluster.start_agent("h1", "cpus:2;mem:512")
    cluster.wait_for_agents(first, ["h1"])
    scheduler = RecordingScheduler()
    cluster.driver(scheduler, "guarded")
    scheduler.wait(lambda: scheduler.of("registered"), 20, "the framework to register", cluster.diagnostics)
    guards = wait_until(lambda: guards_of(first.proc.pid), 10, "the leader's guard")

    first.proc.kill()   # SIGKILL of its process group
    (second,) = [master for master in masters if master is not first]
    cluster.wait_for_leader(among=[second], timeout=GUARD_WAIT)
    cluster.wait_for_agents(second, ["h1"], timeout=GUARD_WAIT)
    scheduler.wait(lambda: scheduler.of("reregistered"), GUARD_WAIT, "the framework to re-register",
                   cluster.diagnostics)
    assert [info.address for info in scheduler.of("reregistered")] == [second.address]
    wait_until(lambda: not any(alive(pid) for pid in guards), GUARD_WAIT, "the dead leader's guard to exit")


def test_a_session_beyond_the_records_bounds_is_not_guarded_and_says_so(caplog):
    from mesoslike.ha.session_guard import SessionGuard

    guard = SessionGuard(",".join(f"zk{i}.example:2181" for i in range(200)), 5.0)   # hosts past the bound
    guard.start()
    try:
        guard.tell((0x1234, bytes(16)))   # in kazoo's thread in a master: must not raise
        assert "cannot be told this session" in caplog.text
    finally:
        guard.bye()
    assert guard.pid is not None and not alive(guard.pid)
