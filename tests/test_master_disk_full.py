"""A master whose registry cannot be written (a full disk under its work
dir) acknowledges nothing it could not persist, says so once, and carries on
when there is room again (issue 12 §3).

Two ways: a store whose writes fail on demand (always runs), and the file
store on a real, tiny tmpfs that fills up (needs root to mount; skipped
otherwise — the first test covers the behaviour)."""

import contextlib
import errno
import json
import logging
import os
import subprocess
import uuid

import pytest

from environment import unavailable
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from mesoslike.master.storage import FileRegistryStore, MemoryRegistryStore, RegistryWriteError
from mesoslike.resources import Resources
from mesoslike.transport import Client
from mesoslike.wire import AgentInfo, FrameworkInfo
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(60)


class FillableStore(MemoryRegistryStore):
    """A memory store whose writes fail, as on a full disk, while ``full``."""

    def __init__(self):
        super().__init__()
        self.full = False
        self.tries = 0

    def write(self, document):
        self.tries += 1
        if self.full:
            raise RegistryWriteError(f"cannot write the registry /work/registry.json: {os.strerror(errno.ENOSPC)}")
        super().write(document)


def turn_until(runtime, condition, what, client=None, heard=None, max_turns=2000):
    """Turn the master's loop by hand until ``condition()``; what ``client``
    hears meanwhile goes to ``heard``."""
    for _ in range(max_turns):
        if condition():
            return
        runtime._turn()
        if client is not None:
            heard.extend(message for _, message in client.receive())
    raise AssertionError(f"no {what} within {max_turns} turns")


def registration(hostname="node-0"):
    return m.RegisterAgent(AgentInfo(hostname, Resources.parse("cpus:2;mem:512")))


def test_a_master_that_cannot_write_its_registry_acknowledges_nothing_until_it_can(caplog):
    """Found by the issue: with a full disk registry writes failed with ~2.6
    tracebacks a second and changes were acknowledged without being written."""
    store = FillableStore()
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None), registry_store=store)
    agent, framework = Client(runtime.address), Client(runtime.address)
    heard = []
    try:
        store.full = True
        with caplog.at_level(logging.INFO, logger="mesoslike.master"):
            agent.send(registration())
            framework.send(m.Subscribe(FrameworkInfo("waiting", failover_timeout=60.0)))
            # the registration is handled, its write fails; the write is tried again and again
            turn_until(runtime, lambda: store.tries >= 3, "retries of the write", agent, heard)
            turn_until(runtime, lambda: store.tries >= 4, "retries of the write", framework, heard)
            assert heard == [], "the master acknowledged what it could not write"
            assert "registry_writable 0" in runtime.metrics.runtime_metrics().replace("mesoslike_", "")
            assert runtime._health()["registry_writable"] is False
            errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
            assert len(errors) == 1 and errors[0].exc_info is None, [r.getMessage() for r in errors]
            assert "No space left on device" in errors[0].getMessage()
        store.full = False
        turn_until(runtime, lambda: any(isinstance(h, m.AgentRegistered) for h in heard), "AGENT_REGISTERED",
                   agent, heard)
        turn_until(runtime, lambda: any(isinstance(h, m.Subscribed) for h in heard), "SUBSCRIBED",
                   framework, heard)
        (agent_id,) = store.document["agents"]
        assert [h.agent_id for h in heard if isinstance(h, m.AgentRegistered)] == [agent_id]
        (framework_id,) = store.document["frameworks"]
        assert [h.framework_id for h in heard if isinstance(h, m.Subscribed)] == [framework_id]
        assert runtime._health()["registry_writable"] is True
        assert "mesoslike_registry_write_failures_total" in runtime.metrics.runtime_metrics()
    finally:
        agent.close()
        framework.close()
        runtime._close()


@contextlib.contextmanager
def tiny_tmpfs(path, size="16k"):
    path.mkdir()
    if os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root; the simulated full disk covers this")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the simulated full disk covers this")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory):
    """Fill the file system of ``directory``; the filler file's path."""
    filler = directory / f"filler-{uuid.uuid4().hex[:6]}"
    with open(filler, "wb", buffering=0) as handle:
        try:
            while handle.write(b"\0" * 1024):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


def test_a_full_tmpfs_under_the_work_dir(tmp_path):
    with tiny_tmpfs(tmp_path / "work") as work:
        store = FileRegistryStore(work)
        runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None), registry_store=store)
        agent = Client(runtime.address)
        heard = []
        try:
            filler = fill(work)
            real_write = store.write
            tries = []
            store.write = lambda document: tries.append(1) or real_write(document)
            agent.send(registration())
            turn_until(runtime, lambda: len(tries) >= 3, "retries of the write", agent, heard)
            assert heard == [] and not (work / "registry.json").exists()
            assert not (work / "registry.json.partial").exists()   # removed: its space is needed
            filler.unlink()
            turn_until(runtime, lambda: heard, "AGENT_REGISTERED", agent, heard)
            (registered,) = heard
            assert list(json.loads((work / "registry.json").read_text())["agents"]) == [registered.agent_id]
        finally:
            agent.close()
            runtime._close()


# ------------------------------------------------ with ZooKeeper: a blip while answers are held
from kazoo.protocol.states import KazooState  # noqa: E402

from mesoslike.ha.url import ZkUrl  # noqa: E402
from zk_helpers import zookeeper, zookeeper_server  # noqa: E402,F401 (fixtures)


def test_answers_held_for_an_unwritten_registry_never_go_out_after_a_connection_blip(zookeeper):
    """Held answers go with the core when leadership is in doubt; a core
    whose changes the registry lacks is not resumed, so they are never
    sent, and the master leads on with a fresh core."""
    url = ZkUrl.parse(zookeeper.url(f"held-{uuid.uuid4().hex[:8]}"))
    runtime = MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, zk=url, zk_session_timeout=4.0))
    framework = None
    try:
        turn_until(runtime, lambda: runtime.is_leader, "leadership")
        store, failing = runtime._store, [True]
        real_write = store.write_prepared

        def write_or_fail(prepared):
            if failing[0]:
                raise RegistryWriteError("cannot write the registry: ZooKeeper said no")
            return real_write(prepared)
        store.write_prepared = write_or_fail
        framework = Client(runtime.address)
        heard = []
        framework.send(m.Subscribe(FrameworkInfo("held", failover_timeout=60.0)))
        turn_until(runtime, lambda: runtime._held, "the answer to be held", framework, heard)
        runtime._contender._on_state(KazooState.SUSPENDED)
        runtime._turn()
        assert not runtime._held and not runtime.is_leader
        failing[0] = False
        runtime._contender._on_state(KazooState.CONNECTED)
        turn_until(runtime, lambda: runtime.is_leader, "leadership again", framework, heard)
        first = runtime.core
        assert first is not None and first.frameworks == {}, "the core whose change was not written served on"
        assert heard == []
        framework.send(m.Subscribe(FrameworkInfo("held", failover_timeout=60.0)))   # the driver's retry
        turn_until(runtime, lambda: heard, "SUBSCRIBED", framework, heard)
        assert isinstance(heard[0], m.Subscribed)
    finally:
        if framework is not None:
            framework.close()
        runtime._close()
