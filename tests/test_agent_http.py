"""The agent's HTTP endpoints (issue 15 §5, §8): state, statistics, metrics
and the sandbox files — and that no request reads anything outside the
sandboxes: ``..``, absolute paths, symlinks leading out, URL-encoded
traversal and NUL bytes are refused (403; 404 for what is then only a
strange name) and counted in ``/metrics``."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from agent_helpers import FakeMaster
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.resources import Resources
from mesoslike.wire import messages as m
from mesoslike.wire.types import FrameworkInfo, TaskInfo, TaskState
from waiting import wait_until

pytestmark = pytest.mark.timeout(60)

FW = FrameworkInfo(name="demo", id="fw-1")
SECRET = "TOP-SECRET-OUTSIDE-THE-SANDBOXES"
#: the task prints, plants symlinks out of its sandbox (and one inside), then waits
TASK = ("printf 'line one\\nline two\\n'; printf 'oops\\n' >&2; printf '\\377\\376raw' > binary; "
        "ln -s {secret} leak; ln -s .. up; ln -s ../../.. out; ln -s /etc leak_dir; ln -s stdout inside; mkdir sub; echo deep > sub/f; "
        "touch ready; sleep 60")


def get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers.get("Content-Type", "")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A running agent with one task that printed, planted its symlinks and waits (one for the module:
    every test only reads)."""
    master = FakeMaster()
    work_dir = tmp_path_factory.mktemp("http") / "work"
    work_dir.mkdir()
    secret = work_dir / "secret.txt"          # in the work dir, beside the sandboxes: never to be served
    secret.write_text(SECRET)
    runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:256;disk:10", hostname="web",
                                         work_dir=work_dir, isolation="posix")).start()
    try:
        master.register()
        task = TaskInfo("t1", "agent-1", TASK.format(secret=secret), Resources.parse("cpus:0.5;mem:64"))
        master.send(m.RunTask(FW, task))
        assert [master.update("t1").state for _ in range(2)] == [TaskState.STARTING, TaskState.RUNNING]
        ready = work_dir / "sandboxes" / "fw-1" / "t1" / "ready"
        wait_until(ready.exists, 10, "the task to be ready")
        yield runtime, runtime.http_address
    finally:
        runtime.stop()
        master.close()


def test_health_state_and_statistics(served):
    runtime, http = served
    status, body, kind = get(f"{http}/health")
    assert status == 200 and kind == "application/json"
    assert json.loads(body) == {"healthy": True, "registered": True, "agent_id": "agent-1", "draining": False}
    state = json.loads(get(f"{http}/state")[1])
    assert state["id"] == "agent-1" and state["http_address"] == http and state["isolation"]["name"] == "posix"
    (task,) = state["tasks"]
    assert (task["id"], task["state"], task["sandbox_path"]) == ("t1", TaskState.RUNNING, "fw-1/t1")
    assert task["pid"] == runtime.executor.pid("fw-1", "t1") and task["sandbox"].endswith("sandboxes/fw-1/t1")
    (stats,) = json.loads(get(f"{http}/monitor/statistics")[1])
    assert (stats["framework_id"], stats["task_id"]) == ("fw-1", "t1")
    assert stats["statistics"]["mem_limit_bytes"] == 64 * 1024 * 1024 and not stats["statistics"]["enforced"]
    assert get(f"{http}/nope")[0] == 404
    assert _post(f"{http}/state") == 405


def _post(url: str) -> int:
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=b"{}", method="POST"), timeout=5)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def test_files_browse_read_and_download(served):
    _, http = served
    (framework,) = json.loads(get(f"{http}/files/browse")[1])
    assert framework["path"] == "fw-1" and framework["mode"].startswith("d")
    names = {e["path"]: e for e in json.loads(get(f"{http}/files/browse?path=fw-1/t1")[1])}
    assert {"fw-1/t1/stdout", "fw-1/t1/stderr", "fw-1/t1/leak", "fw-1/t1/sub"} <= set(names)
    assert names["fw-1/t1/leak"]["mode"].startswith("l")                        # listed as what it is
    read = json.loads(get(f"{http}/files/read?path=fw-1/t1/stdout")[1])
    assert read == {"data": "line one\nline two\n", "offset": 0}
    assert json.loads(get(f"{http}/files/read?path=fw-1/t1/stdout&offset=5&length=3")[1]) == \
        {"data": "one", "offset": 5}
    assert json.loads(get(f"{http}/files/read?path=fw-1/t1/stdout&offset=-1")[1]) == {"data": "", "offset": 18}
    assert json.loads(get(f"{http}/files/read?path=fw-1/t1/stdout&offset=18")[1]) == {"data": "", "offset": 18}
    assert get(f"{http}/files/read?path=fw-1/t1/stdout&offset=99")[0] == 400
    assert get(f"{http}/files/read?path=fw-1/t1/stdout&offset=x")[0] == 400
    assert get(f"{http}/files/read?path=fw-1/t1/nothing")[0] == 404
    assert get(f"{http}/files/read?path=fw-1/t1")[0] == 400                     # a directory
    assert get(f"{http}/files/read")[0] == 400                                  # no path
    raw = json.loads(get(f"{http}/files/read?path=fw-1/t1/binary")[1])["data"]
    assert raw.encode("utf-8", "surrogateescape") == b"\xff\xferaw"           # bytes survive, offsets stay bytes
    assert json.loads(get(f"{http}/files/read?path=fw-1/t1/inside")[1])["data"] == "line one\nline two\n"
    assert json.loads(get(f"{http}/files/read?path=fw-1/t1/sub/f")[1])["data"] == "deep\n"
    assert json.loads(get(f"{http}/files/read?path=fw-1/t1/up/t1/sub/f")[1])["data"] == "deep\n"  # up, but inside
    status, body, kind = get(f"{http}/files/download?path=fw-1/t1/stderr")
    assert (status, body, kind) == (200, b"oops\n", "application/octet-stream")


@pytest.mark.parametrize("query, status, kind", [
    ("path=../secret.txt", 403, "parent"),
    ("path=fw-1/t1/../../../secret.txt", 403, "parent"),
    ("path=..", 403, "parent"),
    ("path=/etc/passwd", 403, "absolute"),
    ("path=" + "%2Fetc%2Fpasswd", 403, "absolute"),
    ("path=%2e%2e%2fsecret.txt", 403, "parent"),                  # URL-encoded ../ : decoded once, refused
    ("path=..%2F..%2Fsecret.txt", 403, "parent"),
    ("path=fw-1/t1/leak", 403, "symlink"),                       # a symlink to the secret
    ("path=fw-1/t1/up/../secret.txt", 403, "parent"),
    ("path=fw-1/t1/leak_dir/passwd", 403, "symlink"),            # through a symlinked directory
    ("path=fw-1/t1/out/secret.txt", 403, "symlink"),             # a relative symlink up and out
    ("path=fw-1/t1/stdout%00", 403, "invalid"),
    ("path=%252e%252e%252fsecret.txt", 404, ""),                  # double-encoded: only a strange name
])
@pytest.mark.parametrize("endpoint", ["read", "download", "browse"])
def test_nothing_outside_the_sandboxes_is_served_and_every_refusal_is_counted(served, endpoint, query, status, kind):
    _, http = served
    before = _refusals(http)
    code, body, _ = get(f"{http}/files/{endpoint}?{query}")
    assert SECRET.encode() not in body and b"root:" not in body
    if endpoint == "browse" and status == 404 and code == 400:
        return
    assert code == status, body
    after = _refusals(http)
    expected = dict(before)
    if kind:
        expected[kind] = expected.get(kind, 0) + 1
    assert after == expected


def _refusals(http: str) -> dict[str, int]:
    counts = {}
    for line in get(f"{http}/metrics")[1].decode().splitlines():
        if line.startswith("mesoslike_agent_files_refused_total{"):
            kind = line.split('reason="')[1].split('"')[0]
            counts[kind] = int(float(line.rsplit(" ", 1)[1]))
    return counts


def test_metrics_are_prometheus_text(served):
    _, http = served
    status, body, kind = get(f"{http}/metrics")
    assert status == 200 and kind.startswith("text/plain")
    text = body.decode()
    assert "# TYPE mesoslike_agent_files_refused_total counter" in text
    assert 'mesoslike_agent_tasks{state="TASK_RUNNING"} 1' in text and "mesoslike_agent_registered 1" in text
