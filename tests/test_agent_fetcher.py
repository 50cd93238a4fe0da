"""Issue 18 §3: the fetcher (``TaskInfo.uris``), end to end with real
processes: an in-process agent whose tasks' supervisors fetch from a real
HTTP server on 127.0.0.1 (http.server in a thread, counting its requests)
and from files, the test playing the master. Plus the codec's validation of
the new field, and hostile archives."""

import http.server
import io
import os
import shutil
import socket
import stat
import tarfile
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import msgpack
import pytest

from agent_helpers import master  # noqa: F401 (fixture)
from mesoslike.agent.executor import sandbox_path
from mesoslike.agent.fetcher import FetchError, extract
from mesoslike.agent.runtime import AgentRuntime
from mesoslike.agent.settings import AgentSettings
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources
from mesoslike.wire import WireError, decode, encode
from mesoslike.wire import messages as m
from mesoslike.wire.types import CommandURI, FrameworkInfo, TaskInfo, TaskState

pytestmark = pytest.mark.timeout(90)

FW = FrameworkInfo(name="fetch", id="fw-1")
FETCH_REASON = "REASON_CONTAINER_LAUNCH_FAILED"


# ------------------------------------------------------------ a file server
class FileServer:
    """http.server on 127.0.0.1 in a thread, serving ``files`` (path -> bytes)
    and counting requests per path; ``/stall`` sends headers, then nothing."""

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: dict[str, int] = {}
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                server.requests[self.path] = server.requests.get(self.path, 0) + 1
                if self.path == "/stall":
                    self.send_response(200)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    server.release.wait(30)
                    return
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    files = FileServer()
    yield files
    files.close()


@pytest.fixture
def make_agent(master, tmp_path):  # noqa: F811 (fixture)
    agents = []

    def make(**kwargs):
        kwargs.setdefault("work_dir", tmp_path / "agent")
        runtime = AgentRuntime(AgentSettings(master=master.address, resources="cpus:4;mem:1024", hostname="h1",
                                             isolation="posix", **{"switch_user": False, **kwargs})).start()
        agents.append(runtime)
        master.register()
        return runtime

    yield make
    for runtime in agents:
        runtime.stop()


def task(task_id, command, uris, user=""):
    return TaskInfo(task_id, "agent-1", command, Resources.parse("cpus:0.5;mem:64"), kill_grace_period=1.0,
                    uris=uris, user=user)


def run(master, task_info, framework=FW):  # noqa: F811 (fixture)
    master.send(m.RunTask(framework, task_info))
    return master.updates_until_terminal(task_info.task_id, timeout=30.0)


def tar_gz(members: dict) -> bytes:
    """A .tar.gz of ``members``: name -> bytes (a file), or ("link", target) / ("hardlink", target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, content in members.items():
            info = tarfile.TarInfo(name)
            if isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "link" else tarfile.LNKTYPE
                info.linkname = content[1]
                archive.addfile(info)
            else:
                info.size, info.mode = len(content), 0o755 if name.endswith(".sh") else 0o644
                archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def zip_of(members: dict, modes: dict | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = ((modes or {}).get(name, 0o100644)) << 16
            archive.writestr(info, content)
    return buffer.getvalue()


# ------------------------------------------------------------ fetching works
def test_http_and_file_uris_are_fetched_into_the_sandbox_before_the_task_starts(master, make_agent, server,  # noqa: F811
                                                                                tmp_path):
    agent = make_agent()
    server.files["/data/config.txt"] = b"from http\n"
    server.files["/bin/tool.sh"] = b"#!/bin/sh\necho tool ran\n"
    local = tmp_path / "local.txt"
    local.write_bytes(b"from a file\n")
    statuses = run(master, task("t", "cat config.txt local.txt renamed.txt && ./tool", [
        CommandURI(f"{server.url}/data/config.txt"),
        CommandURI(f"file://{local}"),
        CommandURI(f"file://{local}", output_file="renamed.txt"),
        CommandURI(f"{server.url}/bin/tool.sh", executable=True, output_file="tool"),
    ]))
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.RUNNING, TaskState.FINISHED], statuses
    sandbox = sandbox_path(agent.work_dir, "fw-1", "t")
    assert (sandbox / "stdout").read_bytes() == b"from http\nfrom a file\nfrom a file\ntool ran\n"
    assert stat.S_IMODE((sandbox / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((sandbox / "config.txt").stat().st_mode) == 0o644


def test_tar_gz_and_zip_archives_are_extracted(master, make_agent, server):  # noqa: F811
    agent = make_agent()
    server.files["/app.tar.gz"] = tar_gz({"app/run.sh": b"#!/bin/sh\necho app\n", "app/conf/a.txt": b"A\n",
                                         "app/link": ("link", "conf/a.txt")})
    server.files["/lib.zip"] = zip_of({"lib/b.txt": b"B\n", "lib/go.sh": b"#!/bin/sh\necho go\n"},
                                      {"lib/go.sh": 0o100755})
    server.files["/keep.tgz"] = tar_gz({"inside": b"no\n"})
    statuses = run(master, task("t", "app/run.sh && cat app/link lib/b.txt && lib/go.sh && test ! -e inside", [
        CommandURI(f"{server.url}/app.tar.gz"), CommandURI(f"{server.url}/lib.zip"),
        CommandURI(f"{server.url}/keep.tgz", extract=False)]))
    assert statuses[-1].state == TaskState.FINISHED, statuses[-1].message
    sandbox = sandbox_path(agent.work_dir, "fw-1", "t")
    assert (sandbox / "stdout").read_bytes() == b"app\nA\nB\ngo\n"
    assert (sandbox / "keep.tgz").is_file() and (sandbox / "app.tar.gz").is_file()   # archives are kept, as Mesos


def test_a_cached_uri_is_downloaded_once_and_served_from_the_cache_after(master, make_agent, server):  # noqa: F811
    agent = make_agent()
    server.files["/big.bin"] = os.urandom(50_000)
    server.files["/fresh.txt"] = b"fresh\n"
    for task_id in ("a", "b"):
        statuses = run(master, task(task_id, "cmp big.bin big.bin && cat fresh.txt", [
            CommandURI(f"{server.url}/big.bin", cache=True), CommandURI(f"{server.url}/fresh.txt")]))
        assert statuses[-1].state == TaskState.FINISHED, statuses[-1].message
        assert (sandbox_path(agent.work_dir, "fw-1", task_id) / "big.bin").read_bytes() == server.files["/big.bin"]
    # only the uncached URI went out again: the server's count is the proof. (The supervisor's log
    # saying "from the cache" is not read: an ended task's run directory is removed in the
    # background once its end is acknowledged, and the test raced that removal in CI.)
    assert server.requests == {"/big.bin": 1, "/fresh.txt": 2}


def test_the_cache_is_bounded_and_evicts_the_least_recently_used(master, make_agent, server):  # noqa: F811
    make_agent(fetcher_cache_size=25_000)
    for name in ("one", "two", "three"):
        server.files[f"/{name}"] = os.urandom(10_000)

    def fetch(task_id, *names):
        statuses = run(master, task(task_id, "true", [CommandURI(f"{server.url}/{n}", cache=True) for n in names]))
        assert statuses[-1].state == TaskState.FINISHED, statuses[-1].message

    fetch("t1", "one", "two")      # cache: one, two
    fetch("t2", "one")             # a hit: one is now the most recently used
    fetch("t3", "three")           # 30 000 > 25 000: two (least recently used) goes
    assert server.requests == {"/one": 1, "/two": 1, "/three": 1}
    fetch("t4", "one", "three")    # both still cached
    fetch("t5", "two")             # evicted: downloaded again
    assert server.requests == {"/one": 1, "/two": 2, "/three": 1}


# -------------------------------------------------------------- fetching fails
def test_a_404_fails_the_task_naming_the_uri_and_the_task_never_runs(master, make_agent, server):  # noqa: F811
    agent = make_agent()
    uri = f"{server.url}/nowhere.tar.gz"
    statuses = run(master, task("t", "touch ran", [CommandURI(uri)]))
    assert [s.state for s in statuses] == [TaskState.STARTING, TaskState.FAILED]
    assert statuses[-1].reason == FETCH_REASON
    assert f"fetching {uri} failed: the server answered HTTP 404" in statuses[-1].message
    assert not (sandbox_path(agent.work_dir, "fw-1", "t") / "ran").exists()


def test_an_unreachable_server_fails_the_task_naming_the_uri(master, make_agent):  # noqa: F811
    make_agent()
    with socket.socket() as probe:   # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    uri = f"http://127.0.0.1:{port}/x.txt"
    failed = run(master, task("t", "true", [CommandURI(uri)]))[-1]
    assert (failed.state, failed.reason) == (TaskState.FAILED, FETCH_REASON)
    assert f"fetching {uri} failed: cannot reach 127.0.0.1:{port}" in failed.message
    assert "refused" in failed.message.lower()


def test_a_missing_file_and_a_stalled_or_oversized_download_fail_the_task(master, make_agent, server, tmp_path):  # noqa: F811
    make_agent(fetcher_timeout=1.0, fetcher_max_size=1000)
    server.files["/large"] = b"x" * 1001
    cases = {f"file://{tmp_path}/missing.txt": "No such file or directory",
             f"{server.url}/stall": "not downloaded within 1 s (--fetcher-timeout)",
             f"{server.url}/large": "more than the 1000 bytes allowed (--fetcher-max-size)"}
    for n, (uri, why) in enumerate(cases.items()):
        started = time.monotonic()
        failed = run(master, task(f"t{n}", "true", [CommandURI(uri)]))[-1]
        assert (failed.state, failed.reason) == (TaskState.FAILED, FETCH_REASON)
        assert f"fetching {uri} failed: " in failed.message and why in failed.message, failed.message
        assert time.monotonic() - started < 20


HOSTILE = {
    "dotdot.tar.gz": (tar_gz({"ok.txt": b"fine", "../escape.txt": b"out"}), "member '../escape.txt' has a '..'"),
    "deep.tar.gz": (tar_gz({"a/../../escape.txt": b"out"}), "has a '..' in its name"),
    "absolute.tar.gz": (tar_gz({"/tmp/escape.txt": b"out"}), "an empty or absolute name"),
    "symlink.tar.gz": (tar_gz({"up": ("link", "../.."), "up/escape.txt": b"out"}), "a link to '../..', outside"),
    "rootlink.tar.gz": (tar_gz({"etc": ("link", "/etc")}), "a link to '/etc', outside the sandbox"),
    "hardlink.tar.gz": (tar_gz({"pw": ("hardlink", "/etc/passwd")}), "a hard link to '/etc/passwd'"),
    "dotdot.zip": (zip_of({"ok.txt": b"fine", "../escape.txt": b"out"}), "member '../escape.txt' has a '..'"),
    "symlink.zip": (zip_of({"link": b"/etc/passwd"}, {"link": 0o120777}), "a symbolic link"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_whole_and_writes_nothing_outside_the_sandbox(master, make_agent, server,  # noqa: F811
                                                                                  name):
    agent = make_agent()
    content, why = HOSTILE[name]
    server.files[f"/{name}"] = content
    failed = run(master, task("t", "touch ran", [CommandURI(f"{server.url}/{name}")]))[-1]
    assert (failed.state, failed.reason) == (TaskState.FAILED, FETCH_REASON)
    assert f"the archive {name} is refused" in failed.message and why in failed.message, failed.message
    sandbox = sandbox_path(agent.work_dir, "fw-1", "t")
    # os.walk, not rglob: the agent may remove a run directory while the tree is read
    escaped = [name for _, _, names in os.walk(agent.work_dir) for name in names if name == "escape.txt"]
    assert not escaped and not (sandbox / "ok.txt").exists()
    assert not (sandbox / "ran").exists()


def test_extract_refuses_a_bomb_larger_than_the_limit(tmp_path):
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(tar_gz({"zeros": bytes(100_000)}))
    with pytest.raises(FetchError, match="unpacks to more than the 50000 bytes"):
        extract(str(archive), "tar", str(tmp_path / "out"), 50_000)
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------- as the task's user
@pytest.fixture
def traversable_dir():
    directory = Path(tempfile.mkdtemp(prefix="mesoslike-fetch-"))
    os.chmod(directory, 0o711)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root (CI runs as root: never skipped there)")
def test_fetched_files_belong_to_the_tasks_user_who_cannot_fetch_what_it_may_not_read(master, make_agent, server,  # noqa: F811
                                                                                    traversable_dir):
    agent = make_agent(work_dir=traversable_dir / "agent", switch_user=True)
    framework = FrameworkInfo(name="fetch", id="fw-1", user="nobody")
    server.files["/app.zip"] = zip_of({"dir/f.txt": b"F\n"})
    public = traversable_dir / "public.txt"
    public.write_bytes(b"public\n")
    public.chmod(0o644)
    server.files["/more.tar.gz"] = tar_gz({"more/g.txt": b"G\n"})
    statuses = run(master, task("t", "cat dir/f.txt more/g.txt public.txt", [
        CommandURI(f"{server.url}/app.zip", cache=True), CommandURI(f"{server.url}/more.tar.gz"),
        CommandURI(f"file://{public}")], "nobody"), framework)
    assert statuses[-1].state == TaskState.FINISHED, statuses[-1].message
    sandbox = sandbox_path(agent.work_dir, "fw-1", "t")
    assert (sandbox / "stdout").read_bytes() == b"F\nG\npublic\n"
    for path in ("app.zip", "dir", "dir/f.txt", "more", "more/g.txt", "public.txt"):
        assert (sandbox / path).owner() == "nobody", path
    secret = traversable_dir / "secret.txt"
    secret.write_bytes(b"root only\n")
    secret.chmod(0o600)
    failed = run(master, task("s", "true", [CommandURI(f"file://{secret}")], "nobody"), framework)[-1]
    assert failed.state == TaskState.FAILED and "Permission denied" in failed.message, failed.message
    assert not (sandbox_path(agent.work_dir, "fw-1", "s") / "secret.txt").exists()


# ---------------------------------------------------------------- settings
def test_bad_fetcher_settings_are_a_config_error(master, tmp_path):  # noqa: F811
    with pytest.raises(ConfigError, match="--fetcher-timeout"):
        AgentRuntime(AgentSettings(master=master.address, resources="cpus:1;mem:64", hostname="h",
                                   work_dir=tmp_path / "a", fetcher_timeout=0))


# ------------------------------------------------------------------- the codec
def test_uris_cross_the_wire_with_mesos_defaults():
    uris = [CommandURI("http://h/a.tgz"), CommandURI("file:///x/y", extract=False, executable=True,
                                                     output_file="z", cache=True)]
    decoded = decode(encode(m.RunTask(FW, task("t", "true", uris)))).task
    assert decoded.uris == uris
    assert (uris[0].extract, uris[0].executable, uris[0].output_file, uris[0].cache) == (True, False, "", False)
    assert decode(encode(m.RunTask(FW, task("t", "true", [])))).task.uris == []


@pytest.mark.parametrize("uri, problem", [
    ({"value": "ftp://h/x"}, "must be a file://, http:// or https:// URI"),
    ({"value": "/etc/passwd"}, "must be a file://, http:// or https:// URI"),
    ({"value": "http://h/a b"}, "printable characters without spaces"),
    ({"value": "http://h/" + "x" * 5000}, "at most 4096"),
    ({"value": "http://h/"}, "names no file: give it an output_file"),
    ({"value": "http://h/x", "output_file": "../x"}, "uri.output_file must be a plain file name"),
    ({"value": "http://h/x", "output_file": ".."}, "uri.output_file must be a plain file name"),
    ({"value": "http://h/x", "output_file": "a/b"}, "uri.output_file must be a plain file name"),
    ({"value": "http://h/x", "extract": 1}, "expected bool"),
    ({"value": 5}, "expected str"),
    ({}, "missing"),
])
def test_hostile_uris_are_refused_by_the_codec_with_a_clear_error(uri, problem):
    plain = msgpack.unpackb(encode(m.RunTask(FW, task("t", "true", []))))
    plain["task"]["uris"] = [uri]
    with pytest.raises(WireError, match=r"RUN_TASK\.task\.uris\[0\]") as caught:
        decode(msgpack.packb(plain))
    assert problem in str(caught.value)


def test_too_many_uris_are_refused():
    plain = msgpack.unpackb(encode(m.RunTask(FW, task("t", "true", []))))
    plain["task"]["uris"] = [{"value": f"http://h/{i}"} for i in range(101)]
    with pytest.raises(WireError, match="at most 100 URIs"):
        decode(msgpack.packb(plain))


def test_the_agent_command_takes_the_fetcher_flags_and_refuses_a_bad_size():
    from click.testing import CliRunner

    from mesoslike.cli import main as cli

    done = CliRunner().invoke(cli, ["agent", "--master", "tcp://127.0.0.1:1", "--fetcher-cache-size", "12XB"])
    assert done.exit_code == 2 and "'12XB' is not a size" in done.output


def test_the_cache_sweeps_partial_downloads_of_dead_supervisors(tmp_path):
    from mesoslike.agent.fetcher import Cache

    tmp_path.joinpath("cache").mkdir()
    stale, live = tmp_path / "cache" / ".fetching-dead", tmp_path / "cache" / ".fetching-live"
    stale.write_bytes(b"partial")
    live.write_bytes(b"partial")
    os.utime(stale, (time.time() - 4000, time.time() - 4000))
    Cache(str(tmp_path / "cache"), 1000, stale_after=3600)
    assert not stale.exists() and live.exists()


def test_a_task_killed_while_it_is_fetched_ends_killed_and_never_runs(master, make_agent, server):  # noqa: F811
    agent = make_agent(fetcher_timeout=1.0)
    master.send(m.RunTask(FW, task("t", "touch ran", [CommandURI(f"{server.url}/stall", output_file="x")])))
    assert master.update("t").state == TaskState.STARTING
    master.send(m.KillTask("fw-1", "t"))
    statuses = master.updates_until_terminal("t")
    assert [s.state for s in statuses] == [TaskState.KILLED], statuses
    assert not (sandbox_path(agent.work_dir, "fw-1", "t") / "ran").exists()
