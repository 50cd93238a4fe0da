"""The registry (hard state) and a master recovering from it after a failover."""

import json

import pytest

from mesoslike.master import MasterConfig, MasterCore
from mesoslike.master.registry import Registry, RegistryFormatError
from mesoslike.master.storage import FileRegistryStore, MemoryRegistryStore
from mesoslike.clock import FakeClock
from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, MasterInfo, TaskInfo, TaskState
from mesoslike.wire import messages as m

pytestmark = pytest.mark.timeout(30)

R = Resources.parse
FW, AG, AG2 = b"fw", b"agent", b"agent2"


def core(registry=None, clock=None, **config):
    defaults = dict(heartbeat_interval=1.0, ping_interval=1.0, max_agent_ping_timeouts=3,
                    agent_reregister_timeout=5.0)
    defaults.update(config)
    return MasterCore(clock or FakeClock(), MasterInfo("m2", "tcp://x:1"), MasterConfig(**defaults),
                      registry=registry)


def sent(sends, kind, peer=None):
    return [s.message for s in sends if isinstance(s.message, kind) and (peer is None or s.peer == peer)]


def test_document_round_trip_and_bad_records_are_skipped(caplog):
    registry = Registry()
    registry.admit_agent(AgentInfo("node-0", R("cpus:4;mem:4096"), {"room": "er0"}, id="a1"))
    registry.add_framework(FrameworkInfo("demo", "eng", 60.0, id="f1", partition_aware=True))
    registry.remove_agent("a0")
    registry.remove_framework("f0")
    registry.update_weights({"eng": 2.0})
    document = json.loads(json.dumps(registry.to_document()))
    assert Registry.from_document(document) == registry
    document["agents"]["bad"] = {"hostname": 5, "resources": "cpus:1"}
    document["agents"]["worse"] = "not a record"
    document["frameworks"]["f9"] = {"name": "x", "failover_timeout": -1}
    document["weights"]["ops"] = 0
    recovered = Registry.from_document(document)
    assert set(recovered.agents) == {"a1"} and set(recovered.frameworks) == {"f1"}
    assert recovered.weights == {"eng": 2.0}
    assert "skipping agent 'bad'" in caplog.text and "skipping framework 'f9'" in caplog.text


@pytest.mark.parametrize("document", [[1, 2], "text", {"format": 99}])
def test_unusable_documents_raise(document):
    with pytest.raises(RegistryFormatError):
        Registry.from_document(document)


def test_changes_are_counted_for_persistence():
    master = core()
    before = master.registry_changes
    master.on_message(FW, m.Subscribe(FrameworkInfo("demo", failover_timeout=30.0)))
    master.on_message(AG, m.RegisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"))))
    assert master.registry_changes == before + 2
    document = master.registry.to_document()
    assert list(document["frameworks"]) == ["m2-F0001"] and list(document["agents"]) == ["m2-S1"]


def failed_over():
    """A leader with a framework running one task on agent a1; a1 and a2
    admitted. Returns a new leader recovered from its registry."""
    old = core()
    old.on_message(FW, m.Subscribe(FrameworkInfo("demo", failover_timeout=20.0)))
    old.on_message(AG, m.RegisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"))))
    old.on_message(AG2, m.RegisterAgent(AgentInfo("node-1", R("cpus:4;mem:4096"))))
    document = json.loads(json.dumps(old.registry.to_document()))
    clock = FakeClock()
    return core(Registry.from_document(document), clock), clock


def test_new_leader_adopts_frameworks_and_admits_returning_agents_with_their_tasks():
    new, clock = failed_over()
    framework = new.frameworks["m2-F0001"]
    assert not framework.connected
    task = TaskInfo("t1", "m2-S1", "sleep 60", R("cpus:1;mem:128"))
    out = new.on_message(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="m2-S1"),
                                                [m.RunningTask("m2-F0001", task, TaskState.RUNNING)],
                                                [FrameworkInfo("demo", id="m2-F0001", failover_timeout=20.0)]))
    assert sent(out, m.AgentRegistered)[0].agent_id == "m2-S1"
    out = new.on_message(FW, m.Subscribe(FrameworkInfo("demo", id="m2-F0001", failover_timeout=20.0)))
    assert sent(out, m.Subscribed)[0].resubscribed
    assert [u.status.state for u in sent(new.on_message(FW, m.Reconcile("m2-F0001")), m.Update)] == \
        [TaskState.RUNNING]
    assert new.allocator.available("m2-S1") == R("cpus:3;mem:3968")


def test_agents_that_do_not_come_back_in_time_are_marked_unreachable_and_may_return_later():
    new, clock = failed_over()
    new.on_message(FW, m.Subscribe(FrameworkInfo("demo", id="m2-F0001", failover_timeout=20.0)))
    new.on_message(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="m2-S1")))
    out = []
    for _ in range(6):
        clock.advance(1.0)
        out += new.tick()
        new.on_message(FW, m.Heartbeat())
        new.on_message(AG, m.Pong("m2-S1"))
    assert [f.agent_id for f in sent(out, m.Failure, FW)] == ["m2-S2"]
    assert "m2-S2" in new.registry.unreachable and "m2-S2" not in new.registry.agents
    assert "m2-S2" not in new.registry.removed_agents
    # as Mesos's master: an agent not back in time is unreachable, not gone; it may come back under its id
    late = new.on_message(AG2, m.ReregisterAgent(AgentInfo("node-1", R("cpus:4;mem:4096"), id="m2-S2")))
    assert sent(late, m.AgentRegistered)[0].agent_id == "m2-S2" and not sent(late, m.ShutdownAgent)
    assert "m2-S2" in new.registry.agents and "m2-S2" not in new.registry.unreachable


def test_frameworks_that_do_not_resubscribe_within_their_failover_timeout_are_torn_down():
    # the failover timeout (20 s) starts after the heartbeat silence that would
    # have disconnected it from the old master (1 s x 5 heartbeats here)
    new, clock = failed_over()
    task = TaskInfo("t1", "m2-S1", "sleep 60", R("cpus:1;mem:128"))
    new.on_message(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="m2-S1"),
                                         [m.RunningTask("m2-F0001", task, TaskState.RUNNING)]))
    out = []
    for _ in range(24):
        clock.advance(1.0)
        out += new.tick()
        new.on_message(AG, m.Pong("m2-S1"))
    assert sent(out, m.ShutdownFramework) == [] and "m2-F0001" in new.frameworks
    for _ in range(2):
        clock.advance(1.0)
        out += new.tick()
        new.on_message(AG, m.Pong("m2-S1"))
    assert sent(out, m.ShutdownFramework, AG) == [m.ShutdownFramework("m2-F0001")]
    assert "m2-F0001" in new.registry.removed_frameworks
    refused = new.on_message(FW, m.Subscribe(FrameworkInfo("demo", id="m2-F0001")))
    assert sent(refused, m.Error)[0].fatal


def test_registry_weights_apply_to_the_new_leader():
    registry = Registry(weights={"gold": 3.0})
    new = core(registry)
    assert new.allocator.snapshot()["weights"] == {"gold": 3.0}


def test_reconciling_a_task_whose_agent_is_expected_back_gets_no_answer_yet():
    new, clock = failed_over()
    new.on_message(FW, m.Subscribe(FrameworkInfo("demo", id="m2-F0001", failover_timeout=20.0)))
    out = new.on_message(FW, m.Reconcile("m2-F0001", [m.ReconcileTask("t1", "m2-S1"),
                                                      m.ReconcileTask("t2", "gone-agent")]))
    assert [(u.status.task_id, u.status.state) for u in sent(out, m.Update)] == [("t2", TaskState.LOST)]


# ----------------------------------------------------------------- what changed since the last store
def test_the_registry_records_which_records_changed_until_marked_stored():
    registry = Registry()
    assert not registry.changes()
    registry.admit_agent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="a1"))
    registry.admit_agent(AgentInfo("node-1", R("cpus:4;mem:4096"), id="a2"))
    registry.add_framework(FrameworkInfo("demo", id="f1"))
    registry.update_weights({"eng": 2.0})
    changes = registry.changes()
    assert changes.agents == {"a1", "a2"} and changes.frameworks == {"f1"} and changes.sections == {"weights"}
    registry.remove_agent("a2")  # after the snapshot: still to store once it is marked
    registry.mark_stored(changes)
    assert registry.changes().agents == {"a2"} and registry.changes().sections == {"removed_agents"}
    registry.mark_stored(registry.changes())
    assert not registry.changes()


def test_changes_that_change_nothing_are_not_recorded():
    registry = Registry()
    registry.admit_agent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="a1"))
    registry.add_framework(FrameworkInfo("demo", id="f1"))
    registry.update_weights({"eng": 2.0})
    registry.remove_agent("a0")
    registry.mark_stored(registry.changes())
    registry.admit_agent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="a1"))  # re-registered as before
    registry.add_framework(FrameworkInfo("demo", id="f1"))
    registry.update_weights({"eng": 2.0})
    registry.remove_agent("a0")  # removed already
    assert not registry.changes()
    registry.remove_framework("f1")
    assert registry.changes().frameworks == {"f1"} and registry.changes().sections == {"removed_frameworks"}


def test_a_loaded_registry_has_no_changes_and_compares_by_value_only():
    registry = Registry()
    registry.admit_agent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="a1"))
    loaded = Registry.from_document(json.loads(json.dumps(registry.to_document())))
    assert not loaded.changes() and registry.changes()
    assert loaded == registry


@pytest.mark.parametrize("make_store", [lambda tmp: MemoryRegistryStore(), lambda tmp: FileRegistryStore(tmp)],
                         ids=["memory", "file"])
def test_document_stores_keep_the_whole_registry_and_mark_it_stored(tmp_path, make_store):
    store = make_store(tmp_path)
    assert store.load() == Registry()
    registry = Registry()
    registry.admit_agent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="a1"))
    registry.remove_framework("f0")
    registry.update_weights({"eng": 2.0})
    store.store(registry)
    assert not registry.changes()
    assert store.load() == registry
    if isinstance(store, FileRegistryStore):
        assert FileRegistryStore(tmp_path).load() == registry


def test_a_file_store_with_a_broken_file_refuses_to_load(tmp_path):
    (tmp_path / "registry.json").write_text("{not json")
    with pytest.raises(RegistryFormatError, match="not valid JSON"):
        FileRegistryStore(tmp_path).load()


def test_a_framework_with_no_failover_timeout_survives_a_master_failover():
    """`mesoslike run` has failover_timeout=0: the new leader tore it down (and
    killed its tasks) before its driver could re-subscribe. Found running the
    README's HA steps by hand."""
    old = core()
    old.on_message(FW, m.Subscribe(FrameworkInfo("run", failover_timeout=0.0)))
    old.on_message(AG, m.RegisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"))))
    clock = FakeClock()
    new = core(Registry.from_document(json.loads(json.dumps(old.registry.to_document()))), clock)
    task = TaskInfo("t1", "m2-S1", "sleep 60", R("cpus:1;mem:128"))
    new.on_message(AG, m.ReregisterAgent(AgentInfo("node-0", R("cpus:4;mem:4096"), id="m2-S1"),
                                         [m.RunningTask("m2-F0001", task, TaskState.RUNNING)]))
    out = []
    for _ in range(3):   # the driver comes back a few seconds later
        clock.advance(1.0)
        out += new.tick()
    out += new.on_message(FW, m.Subscribe(FrameworkInfo("run", id="m2-F0001", failover_timeout=0.0)))
    assert sent(out, m.ShutdownFramework) == [] and sent(out, m.Subscribed)[0].resubscribed
    assert "t1" in new.frameworks["m2-F0001"].tasks


def test_a_registry_equals_what_it_stores_so_a_kept_core_resumes_after_a_blip():
    """The leader keeps its core through a ZooKeeper connection blip and
    resumes with it if the registry it reads back is the one it wrote. A
    framework's receipt, web page and hostname are in the core's registry but
    not stored: they must not make the two differ (they did, and every blip
    dropped the soft state of a leader with a framework subscribed)."""
    from mesoslike.master.leadership import Kept, Leadership, Loading, RegistryLoaded, Resume

    registry = Registry()
    registry.add_framework(FrameworkInfo("f", id="fw-1", hostname="h", webui_url="http://h/ui",
                                         principal="p", principal_receipt="receipt"))
    registry.admit_agent(AgentInfo("h1", Resources.parse("cpus:2;mem:512"), id="a-1"))
    stored = Registry.from_document(json.loads(json.dumps(registry.to_document())))
    assert stored == registry
    stored.add_framework(FrameworkInfo("f", id="fw-2"))
    assert stored != registry   # what is stored still counts

    class KeptCore:   # the core the leader kept through the blip, as the machine sees it
        registry_changes = 0

    KeptCore.registry = registry
    core = KeptCore()
    leadership = Leadership(hold_for=2.0, stall_after=None, retry_every=0.5,
                            state=Loading(Kept(core, "/z1", persisted=0, until=2.0)))
    read_back = Registry.from_document(json.loads(json.dumps(registry.to_document())))
    assert leadership.process(RegistryLoaded(read_back, "/z1"), 0.3) == [Resume(core, ())]
