"""Typed agent attributes, constraints on a real cluster, and labels (issue
18 §5, §5b): the attribute grammar and its errors, the codec's checks and
bounds, and end to end — ``mesoslike run --constraint`` placing instances on
agents with different attributes, an unsatisfiable constraint reported, and
labels of a framework and a task in ``/state`` and in the status updates the
framework receives."""

from __future__ import annotations

import subprocess
import sys

import msgpack
import pytest

from e2e_helpers import REPO, RecordingScheduler, cluster  # noqa: F401 (cluster: a fixture)
from mesoslike import ConfigError, Filters, FrameworkInfo, Offer, Resources, TaskInfo, TaskState, TaskStatus
from mesoslike.agent.resources_probe import parse_attributes as agent_attributes
from mesoslike.attributes import RANGES, SCALAR, SET, TEXT, AttributesError, parse_attributes, typed_attributes
from mesoslike.wire import AgentInfo, WireError, decode, encode
from mesoslike.wire import messages as m
from mesoslike.wire.types import MAX_LABELS, Label

pytestmark = pytest.mark.timeout(120)

ATTRIBUTES = "rack:r1;zone:a;ssd:true;level:3;ports:[1000-2000, 3000-3100];tags:{a,b,a}"


# ------------------------------------------------------------ the grammar
def test_attributes_parse_to_typed_values_by_the_mesos_grammar():
    canonical = parse_attributes(ATTRIBUTES)
    assert canonical == {"rack": "r1", "zone": "a", "ssd": "true", "level": "3",
                         "ports": "[1000-2000,3000-3100]", "tags": "{a,b}"}
    typed = {name: (a.type, a.value) for name, a in typed_attributes(canonical).items()}
    assert typed == {"rack": (TEXT, "r1"), "zone": (TEXT, "a"), "ssd": (TEXT, "true"), "level": (SCALAR, 3.0),
                     "ports": (RANGES, ((1000, 2000), (3000, 3100))), "tags": (SET, ("a", "b"))}
    assert parse_attributes("cost:2.50;speed:-1e3") == {"cost": "2.5", "speed": "-1000"}


@pytest.mark.parametrize("text, problem", [
    ("ports:[1000-", "no closing ']'"),
    ("ports:[2000-1000]", "ends before it begins"),
    ("ports:[a-b]", "not a range BEGIN-END of integers"),
    ("tags:{a,b", "no closing '}'"),
    ("tags:{a b}", "not a set item"),
    ("rack:r]1", "bracket or brace outside"),
    ("rack", "expected NAME:VALUE"),
    ("rack:r1;rack:r2", "given twice"),
    ("ra ck:r1", "not made of letters"),
])
def test_bad_attribute_grammar_is_a_clear_error(text, problem):
    with pytest.raises(AttributesError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        parse_attributes(text)
    with pytest.raises(ConfigError, match="--attributes"):   # what `mesoslike agent --attributes` says
        agent_attributes(text)


# --------------------------------------------------------------- the codec
def tampered(message, change):
    plain = msgpack.unpackb(encode(message), raw=False)
    change(plain)
    return msgpack.packb(plain, use_bin_type=True)


def test_offers_and_registrations_carry_typed_attributes_checked_by_the_codec():
    offer = Offer(id="o1", agent_id="a1", hostname="h1", resources=Resources(cpus=1), attributes=parse_attributes(ATTRIBUTES))
    decoded = decode(encode(m.Offers([offer]))).offers[0]
    assert decoded == offer
    assert decoded.typed_attributes["ports"].value == ((1000, 2000), (3000, 3100))
    assert decoded.typed_attributes["level"].type == SCALAR
    bad = tampered(m.Offers([offer]), lambda plain: plain["offers"][0]["attributes"].update(ports="[1000-"))
    with pytest.raises(WireError, match=r"OFFERS.offers\[0\].*attribute ports.*no closing"):
        decode(bad)
    register = m.RegisterAgent(AgentInfo(hostname="h1", resources=Resources(cpus=1), attributes={"level": "3"}))
    too_many = tampered(register, lambda plain: plain["agent"]["attributes"].update({f"a{i}": "x" for i in range(200)}))
    with pytest.raises(WireError, match=r"REGISTER_AGENT.agent.*attributes are more than 128"):
        decode(too_many)
    with pytest.raises(AttributesError):
        Offer(id="o", agent_id="a", hostname="h", resources=Resources(cpus=1), attributes={"x": "{a"})


def test_labels_round_trip_and_are_bounded_at_the_codec():
    status = TaskStatus(task_id="t", state=TaskState.RUNNING, labels=[Label("team", "ads"), Label("tier", "")])
    assert decode(encode(m.Update(status))).status.labels == [Label("team", "ads"), Label("tier", "")]
    assert TaskInfo(task_id="t", agent_id="a", command="c", resources=Resources(cpus=1),
                    labels={"team": "ads"}).labels == [Label("team", "ads")]
    for change, problem in [
        (lambda p: p["status"].update(labels=[{"key": "k", "value": "v"}] * (MAX_LABELS + 1)), "labels are more than 32"),
        (lambda p: p["status"].update(labels=[{"key": "k" * 129}]), "key of 129 characters is longer than 128"),
        (lambda p: p["status"].update(labels=[{"key": "k", "value": "v" * 513}]), "value of 513 characters"),
        (lambda p: p["status"].update(labels=[{"key": ""}]), "key is empty"),
        (lambda p: p["status"].update(labels=[{"key": "k\n"}]), "control character"),
        (lambda p: p["status"].update(labels=[{"value": "v"}]), r"labels\[0\].key: missing"),
    ]:
        with pytest.raises(WireError, match=r"UPDATE.status.*" + problem):
            decode(tampered(m.Update(status), change))


# --------------------------------------------------------- end to end
def run_cli(cluster, *args, timeout=90):
    return subprocess.run([sys.executable, "-m", "mesoslike", "run", "--master", cluster.address, *args],
                          cwd=str(REPO), env=cluster.client_env(), capture_output=True, text=True, timeout=timeout)


def hosts_of_completed_run(cluster, name):
    framework = next(f for f in cluster.state()["completed_frameworks"] if f["name"] == name)
    return sorted(task["hostname"] for task in framework["completed_tasks"])


def start_racks(cluster):
    cluster.start_master()
    cluster.start_agent("r1-a", "cpus:2;mem:512", "rack:r1;level:3;ports:[1000-2000]")
    cluster.start_agent("r1-b", "cpus:2;mem:512", "rack:r1;level:3")
    cluster.start_agent("r2-a", "cpus:2;mem:512", "rack:r2;level:5;tags:{gpu,ssd}")


def test_agents_typed_attributes_show_in_state_and_constraints_place_run_instances(cluster):
    start_racks(cluster)
    agents = {a["hostname"]: a["attributes"] for a in cluster.state()["agents"]}
    assert agents["r1-a"] == {"rack": "r1", "level": 3.0, "ports": "[1000-2000]"}   # a scalar as a number
    assert agents["r2-a"] == {"rack": "r2", "level": 5.0, "tags": "{gpu,ssd}"}
    shown = subprocess.run([sys.executable, "-m", "mesoslike", "state", "--master", cluster.address], cwd=str(REPO),
                           env=cluster.client_env(), capture_output=True, text=True, timeout=30)
    assert "level:5;rack:r2;tags:{gpu,ssd}" in shown.stdout, shown.stdout + shown.stderr

    # one instance per host: three instances, three hosts (each lasts long enough to count)
    done = run_cli(cluster, "--name", "uniq", "--instances", "3", "--cpus", "0.1",
                   "--constraint", "hostname:UNIQUE", "--", "sleep 1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert hosts_of_completed_run(cluster, "uniq") == ["r1-a", "r1-b", "r2-a"]

    # spread over the two racks, two per rack, and never on an agent unlike the pattern
    done = run_cli(cluster, "--name", "spread", "--instances", "4", "--cpus", "0.1",
                   "--constraint", "rack:GROUP_BY:2", "--constraint", "hostname:UNLIKE:r1-b", "--", "sleep 1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert hosts_of_completed_run(cluster, "spread") == ["r1-a", "r1-a", "r2-a", "r2-a"]

    # the example framework places by the same module, labels its tasks and reads them back
    done = subprocess.run([sys.executable, "examples/constraints.py", "--master", cluster.address, "--replicas", "3",
                           "--seconds", "0.5", "--constraint", "hostname:UNIQUE", "--constraint", "rack:GROUP_BY:2"],
                          cwd=str(REPO), env=cluster.client_env(), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "agent r2-a: rack='r2' (TEXT), level=5.0 (SCALAR), tags=('gpu', 'ssd') (SET)" in done.stdout
    assert "placed 3 replicas on ['r1-a', 'r1-b', 'r2-a']" in done.stdout
    assert "(labels {'replica': '0', 'room': ''})" in done.stdout


def test_a_constraint_no_agent_satisfies_is_reported_and_ends_the_run(cluster):
    start_racks(cluster)
    done = run_cli(cluster, "--name", "nowhere", "--constraint", "rack:CLUSTER:r9", "--", "true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "waiting: constraint rack:CLUSTER:r9 refuses every agent offered (r1-a, r1-b, r2-a)" in done.stderr
    assert "1 instance(s) cannot be placed: constraint rack:CLUSTER:r9" in done.stderr
    done = run_cli(cluster, "--constraint", "rack:NEAR", "--", "true")
    assert done.returncode == 1 and "unknown operator 'NEAR'" in done.stderr


class LabelledTask(RecordingScheduler):
    def on_offers(self, driver, offers):
        for offer in offers:
            if not self.of("launched"):
                self._record("launched", offer)
                driver.launch_tasks([offer.id], [TaskInfo(
                    task_id="labelled", agent_id=offer.agent_id, command="sleep 600",
                    resources=Resources(cpus=0.1, mem=32), labels=[Label("team", "ads"), Label("canary")])])
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=3600.0))


def test_labels_reach_state_and_the_status_updates_a_framework_receives(cluster):
    cluster.start_master()
    cluster.start_agent("labels-host", "cpus:1;mem:256", "rack:r1;level:3;tags:{a,b}")
    fw = LabelledTask()
    framework = FrameworkInfo(name="labelled-fw", labels=[Label("owner", "data-eng")])
    cluster.driver(fw, "labelled-fw", framework=framework)
    running = fw.wait(lambda: [s for s in fw.statuses("labelled") if s.state == TaskState.RUNNING], 30,
                      "the labelled task running", cluster.diagnostics)
    assert running[0].labels == [Label("team", "ads"), Label("canary", "")]
    offer = fw.of("launched")[0]
    assert offer.typed_attributes["level"].value == 3.0 and offer.typed_attributes["tags"].value == ("a", "b")
    state = cluster.framework("labelled-fw")
    assert state["labels"] == [{"key": "owner", "value": "data-eng"}]
    task = next(t for t in state["tasks"] if t["id"] == "labelled")
    assert task["labels"] == [{"key": "team", "value": "ads"}, {"key": "canary", "value": ""}]

    # an update the master makes up (its agent died: TASK_LOST) carries the task's labels too
    cluster.kill_agent("labels-host")
    lost = fw.wait(lambda: [s for s in fw.statuses("labelled") if s.state == TaskState.LOST], 20,
                   "TASK_LOST of the labelled task", cluster.diagnostics)
    assert lost[0].source == "SOURCE_MASTER" and lost[0].labels == [Label("team", "ads"), Label("canary", "")]


def test_a_pymesos_scheduler_sees_typed_attributes_and_status_labels_as_mesos_json():
    from mesoslike.compat._pymesos_shapes import offer_message, status_message

    offer = Offer(id="o1", agent_id="a1", hostname="h1", resources=Resources(cpus=1),
                  attributes=parse_attributes("rack:r1;level:3;ports:[1000-2000];tags:{a,b}"))
    assert offer_message(offer, "fw")["attributes"] == [
        {"name": "level", "type": "SCALAR", "scalar": {"value": 3.0}},
        {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 1000, "end": 2000}]}},
        {"name": "rack", "type": "TEXT", "text": {"value": "r1"}},
        {"name": "tags", "type": "SET", "set": {"item": ["a", "b"]}}]
    status = TaskStatus(task_id="t", state=TaskState.RUNNING, labels=[Label("team", "ads")])
    assert status_message(status)["labels"] == {"labels": [{"key": "team", "value": "ads"}]}


def test_a_frameworks_labels_survive_in_the_registry_a_new_leader_reads():
    from mesoslike.master.registry import Registry

    registry = Registry()
    registry.add_framework(FrameworkInfo(name="fw", id="fw-1", labels={"owner": "data-eng"}))
    registry.agents["a1"] = AgentInfo(hostname="h1", resources=Resources(cpus=1), id="a1",
                                      attributes=parse_attributes("rack:r1;ports:[1-2]"))
    restored = Registry.from_document(registry.to_document())
    assert restored.frameworks["fw-1"].labels == [Label("owner", "data-eng")]
    assert restored.agents["a1"].attributes == {"rack": "r1", "ports": "[1-2]"}
