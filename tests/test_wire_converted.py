"""The value types converted when made, not when decoded (mesoslike.converted_structs.ConvertedWhenMade):
``TaskInfo``, ``FrameworkInfo`` and ``AgentInfo`` convert and check their fields
when one is made by a call, and the compiled codec does the same for a decoded one
from their ``__wire_converters__`` on the fields that are not empty — so msgspec
makes no Python call per task of a re-registration (failover30k,
docs/performance.rst "Stop 15: failover, an agent's admission")."""

import msgpack
import pytest

from mesoslike.resources import Resources
from mesoslike.wire import AgentInfo, FrameworkInfo, TaskInfo, WireError, decode, encode
from mesoslike.wire import messages as m
from mesoslike.wire.types import CommandURI, Label, Secret

R = Resources.parse


def _reregistration(task: TaskInfo, framework: FrameworkInfo, agent: AgentInfo) -> m.ReregisterAgent:
    return m.ReregisterAgent(agent, [m.RunningTask(framework.id, task, "TASK_RUNNING")], [framework])


def _plain_frame(**changes):
    """A REREGISTER_AGENT frame of plain data, its framework's or agent's fields changed."""
    framework = {"name": "fw", "id": "fw-1", **changes.pop("framework", {})}
    agent = {"hostname": "h", "resources": "cpus:4", "id": "a1", **changes.pop("agent", {})}
    task = {"task_id": "t", "agent_id": "a1", "command": "c", "resources": "cpus:1", **changes.pop("task", {})}
    return msgpack.packb({"v": 1, "type": "REREGISTER_AGENT", "agent": agent,
                          "tasks": [{"framework_id": "fw-1", "task": task, "state": "TASK_RUNNING"}],
                          "frameworks": [framework]}, use_bin_type=True)


def test_decoding_makes_no_call_into_the_types_and_gives_what_a_call_makes(monkeypatch):
    made = {"n": 0}
    for cls in (TaskInfo, FrameworkInfo, AgentInfo):
        convert = cls._convert

        def counted(self, convert=convert):
            made["n"] += 1
            convert(self)
        monkeypatch.setattr(cls, "_convert", counted)
    task = TaskInfo("t", "a1", "c", R("cpus:1"), labels={"k": "v"}, uris=[CommandURI("https://h/f")],
                    environment={"A": "1"}, environment_secrets={"S": Secret("VALUE", value=b"x")},
                    arguments=["a", "b"], shell=False)
    framework = FrameworkInfo("fw", id="fw-1", labels=[("k", "v")], webui_url="https://ui")
    agent = AgentInfo("h", R("cpus:4"), attributes={"rack": "r1"}, id="a1")
    assert made["n"] == 3
    assert task.labels == [Label("k", "v")] and framework.labels == [Label("k", "v")]
    frame = encode(_reregistration(task, framework, agent))
    made["n"] = 0
    decoded = decode(frame)
    assert made["n"] == 0, "msgspec called into the value types"
    assert decoded == _reregistration(task, framework, agent)
    back = decoded.tasks[0].task
    assert type(back.labels) is list and type(back.labels[0]) is Label and type(back.environment_secrets) is dict
    # and a plain task (most): its empty fields as they were, nothing converted
    frame = encode(_reregistration(TaskInfo("t", "a1", "c", R("cpus:1")), FrameworkInfo("fw", id="fw-1"),
                                   AgentInfo("h", R("cpus:4"), id="a1")))
    made["n"] = 0
    plain = decode(frame)
    assert made["n"] == 0 and plain.tasks[0].task == TaskInfo("t", "a1", "c", R("cpus:1"))


@pytest.mark.parametrize("changes, fragment", [
    ({"framework": {"webui_url": "ftp://x"}}, "webui_url must be an http:// or https:// URL"),
    ({"framework": {"labels": [{"key": "k"}] * 33}}, "33 labels are more than 32"),
    ({"agent": {"attributes": {"ra ck": "x"}}}, "is not made of letters"),
    ({"task": {"uris": [{"value": "https://h/f"}] * 101}}, "a task fetches at most 100 URIs"),
    ({"task": {"arguments": ["a\x00b"]}}, "without NUL"),
    ({"task": {"environment_secrets": {"1X": {"type": "VALUE", "value": b""}}}}, "shell variable name"),
])
def test_what_a_call_refuses_decoding_refuses_naming_the_field(changes, fragment):
    with pytest.raises(WireError) as info:
        decode(_plain_frame(**changes))
    assert fragment in str(info.value)


def test_made_by_a_call_they_convert_as_before():
    task = TaskInfo("t", "a1", "c", R("cpus:1"))
    assert task.replace(labels=[("k", "v")]).labels == [Label("k", "v")]
    assert FrameworkInfo("fw").replace(labels={"k": "v"}).labels == [Label("k", "v")]
    with pytest.raises(ValueError, match="webui_url"):
        FrameworkInfo("fw", webui_url="ftp://x")
    with pytest.raises(ValueError, match="at most 100 URIs"):
        TaskInfo("t", "a1", "c", R("cpus:1"), uris=[CommandURI("https://h/f")] * 101)
    with pytest.raises(ValueError):
        AgentInfo("h", R("cpus:4"), attributes={"ra ck": "x"})
    assert AgentInfo("h", R("cpus:4"), attributes={"rack": "r1"}).attributes == {"rack": "r1"}


def test_a_task_replaced_is_what_a_task_made_whole_is():
    """``TaskInfo.replace`` of fields its conversion does not touch copies
    the task as it is (converted already); of fields it does, converts and
    checks them as a new task's."""
    import collections

    task = TaskInfo("t", "", "c", R("cpus:1"), environment=collections.OrderedDict(K="v"), labels={"k": "v"},
                    uris=[CommandURI("https://h/f")], arguments=("x",), shell=False)
    copy = task.replace(task_id="t2", agent_id="a1", command="d")
    assert copy == TaskInfo("t2", "a1", "d", R("cpus:1"), environment={"K": "v"}, labels=[Label("k", "v")],
                            uris=[CommandURI("https://h/f")], arguments=["x"], shell=False)
    assert type(copy.environment) is dict and type(copy.arguments) is list and copy.labels == [Label("k", "v")]
    assert task.replace(environment=collections.OrderedDict(A="b")).environment == {"A": "b"}
    assert type(task.replace(environment=collections.OrderedDict(A="b")).environment) is dict
    with pytest.raises(ValueError, match="at most 100 URIs"):
        task.replace(task_id="t3", uris=[CommandURI("https://h/f")] * 101)
    with pytest.raises(ValueError):
        task.replace(arguments=["a\x00b"])


def test_empty_fields_hold_one_shared_empty_value_nobody_can_change():
    """A value's empty list and map fields hold the one shared empty list
    (map) — decoded ones (a new leader decodes a million tasks after a
    failover) and made ones alike, however the empty value was given — so
    the frames are the ones they were (the shared value is the default,
    left out); it refuses every change, being everyone's (failover30o)."""
    from mesoslike.wire.types import NO_ENTRIES, NO_ITEMS

    made = TaskInfo("t", "a1", "c", R("cpus:1"))
    given = TaskInfo("t", "a1", "c", R("cpus:1"), uris=[], labels={}, environment={}, environment_secrets=None,
                     arguments=())
    for task in (made, given, decode(encode(_reregistration(made, FrameworkInfo("fw", id="fw-1"),
                                                            AgentInfo("h", R("cpus:4"), id="a1")))).tasks[0].task):
        assert task.uris is NO_ITEMS and task.labels is NO_ITEMS and task.arguments is NO_ITEMS
        assert task.environment is NO_ENTRIES and task.environment_secrets is NO_ENTRIES
        assert task == made and task.uris == [] and task.environment == {}
    assert encode(_reregistration(given, FrameworkInfo("fw", id="fw-1", labels=[]),
                                  AgentInfo("h", R("cpus:4"), attributes={}, id="a1"))) == \
        encode(_reregistration(made, FrameworkInfo("fw", id="fw-1"), AgentInfo("h", R("cpus:4"), id="a1")))
    decoded = decode(_plain_frame())
    assert decoded.frameworks[0].labels is NO_ITEMS and decoded.agent.attributes is NO_ENTRIES
    assert decoded.tasks[0].task.uris is NO_ITEMS
    # a frame that writes an empty list out is taken as it is: equal, though not the shared one
    assert decode(_plain_frame(task={"uris": []})).tasks[0].task == decoded.tasks[0].task
    for change in (lambda: made.uris.append(CommandURI("https://h/f")), lambda: made.labels.extend([]),
                   lambda: made.arguments.__setitem__(slice(0, 0), ["x"]), lambda: made.environment.update(A="1"),
                   lambda: made.environment_secrets.setdefault("S", None), lambda: made.environment.__setitem__("A", "1")):
        with pytest.raises(TypeError, match="shared empty"):
            change()
    assert NO_ITEMS == [] and NO_ENTRIES == {}
    # an empty value of another type is still converted first: what that refuses is refused
    with pytest.raises(TypeError):
        TaskInfo("t", "a1", "c", R("cpus:1"), labels=0)
    with pytest.raises(TypeError):
        FrameworkInfo("fw", labels=0)
