"""The Fuxi word count example (examples/fuxi_wordcount): prepare, map,
reduce and verify run directly (no cluster), the job file's locality data
against the placement on disk, then the whole demo on a local cluster."""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import REPO, alive, child_env, task_processes
from waiting import wait_until
from mesoslike_frameworks.fuxi.model import load_job_file

EXAMPLE = REPO / "examples" / "fuxi_wordcount"
sys.path.insert(0, str(EXAMPLE))
import prepare  # noqa: E402
import wc  # noqa: E402

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def prepared(tmp_path):
    """A prepared work dir (fast maps) and its parsed job."""
    job = tmp_path / "job.toml"
    done = subprocess.run([sys.executable, str(EXAMPLE / "prepare.py"), "--work-dir", str(tmp_path / "w"),
                           "--job", str(job), "--map-seconds", "0"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "prepared 12 shards" in done.stdout
    return tmp_path / "w", load_job_file(job)


def placed_on_disk(work_dir: Path) -> dict[int, list[str]]:
    """shard index -> the nodes whose data directory holds it."""
    found = collections.defaultdict(list)
    for path in (work_dir / "data").glob("*/shard-*.txt"):
        found[int(re.fullmatch(r"shard-(\d+)\.txt", path.name).group(1))].append(path.parent.name)
    return {index: sorted(hosts) for index, hosts in found.items()}


def independent_count(work_dir: Path) -> collections.Counter:
    """Every shard once, from any copy, with the simplest tokenizer there is."""
    counts = collections.Counter()
    for index, hosts in placed_on_disk(work_dir).items():
        text = (work_dir / "data" / hosts[0] / f"shard-{index}.txt").read_text()
        counts.update(w for w in re.split(r"[^a-z]+", text.lower()) if w)
    return counts


def run_instance(command: str, instance: int, host: str, attempt: int = 1) -> subprocess.CompletedProcess:
    """One instance as the runtime runs it: {instance} substituted, FUXI_* set, /bin/sh -c."""
    env = dict(os.environ, FUXI_INSTANCE=str(instance), FUXI_ATTEMPT=str(attempt), FUXI_HOSTNAME=host)
    return subprocess.run(["/bin/sh", "-c", command.replace("{instance}", str(instance))], env=env,
                          capture_output=True, text=True, timeout=30)


# =================================================================== prepare
def test_prepare_is_deterministic_and_places_every_shard_on_replicas_distinct_nodes(tmp_path):
    for name in ("a", "b"):
        prepare.prepare(tmp_path / name, tmp_path / f"{name}.toml", agents=4, shards=10, replicas=3, seed=7)
    placed = placed_on_disk(tmp_path / "a")
    assert sorted(placed) == list(range(10))
    assert all(len(hosts) == 3 and set(hosts) <= {"node-0", "node-1", "node-2", "node-3"} for hosts in placed.values())
    first_holders = collections.Counter(shard["hosts"][0] for shard in wc.load_manifest(tmp_path / "a")["shards"])
    assert max(first_holders.values()) - min(first_holders.values()) <= 1      # the load is spread
    for path in (tmp_path / "a" / "data").rglob("*.txt"):                      # same seed, same bytes
        assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes()
    other = prepare.shard_text(0, seed=8)
    assert other != (tmp_path / "a" / "data" / placed[0][0] / "shard-0.txt").read_text()


def test_prepare_writes_a_few_hundred_kb_of_zipf_like_text(prepared):
    work_dir, _ = prepared
    manifest = wc.load_manifest(work_dir)
    size = sum(shard["bytes"] for shard in manifest["shards"])
    assert 100_000 < size < 1_000_000
    ranked = [count for _, count in independent_count(work_dir).most_common()]
    assert ranked[0] > 1.5 * ranked[1] > 1.5 * ranked[4] and ranked[0] > 50 * ranked[-1]


def test_a_second_prepare_clears_old_shards_and_outputs(tmp_path):
    work_dir = tmp_path / "w"
    prepare.prepare(work_dir, tmp_path / "job.toml", agents=3, shards=12, replicas=2)
    wc.write_json_atomically(wc.result_path(work_dir), {"stale": True})
    prepare.prepare(work_dir, tmp_path / "job.toml", agents=2, shards=4, replicas=1)
    assert sorted(placed_on_disk(work_dir)) == [0, 1, 2, 3]
    assert not wc.result_path(work_dir).exists()


def test_bad_replicas_are_refused(tmp_path):
    done = subprocess.run([sys.executable, str(EXAMPLE / "prepare.py"), "--work-dir", str(tmp_path), "--job",
                           str(tmp_path / "j.toml"), "--agents", "2", "--replicas", "3"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 2 and "--replicas" in done.stderr


# ================================================================= job file
def test_the_job_files_locality_data_matches_the_placement(prepared):
    work_dir, job = prepared
    map_unit, reduce_unit = job.unit("map"), job.unit("reduce")
    placed = placed_on_disk(work_dir)
    assert map_unit.instance_count == 12 and len(map_unit.data) == 12
    assert {i: sorted(hosts) for i, hosts in enumerate(map_unit.data)} == placed
    assert map_unit.slots == 6 and map_unit.slot.get("cpus") == 0.2 and map_unit.slot.get("mem") == 64
    assert reduce_unit.after == ("map",) and reduce_unit.instance_count == 1
    for unit in (map_unit, reduce_unit):       # absolute paths, the interpreter that ran prepare
        interpreter, script = unit.command.split()[:2]
        assert os.path.isabs(interpreter) and Path(script) == EXAMPLE / "wc.py"
        assert str(work_dir) in unit.command
    assert "{instance}" in map_unit.command and job.backup.enabled


# ==================================================== map, reduce, verify
def test_map_reduce_verify_run_directly_count_right_and_count_local_reads(prepared):
    work_dir, job = prepared
    map_unit = job.unit("map")
    local = 0
    for index, holders in enumerate(map_unit.data):
        host = holders[0] if index % 3 else next(h for h in ("node-0", "node-1", "node-2") if h not in holders)
        local += host in holders
        done = run_instance(map_unit.command, index, host)
        assert done.returncode == 0, done.stderr
        progress = [float(x) for x in re.findall(r"^FUXI_PROGRESS (\S+)$", done.stdout, re.MULTILINE)]
        assert progress and progress == sorted(progress) and progress[-1] == 1.0
        output = json.loads((work_dir / "out" / f"map-{index}.json").read_text())
        assert output["local"] is (host in holders) and output["host"] == host
        assert output["source"] in holders
    assert local == 8
    done = run_instance(job.unit("reduce").command, 0, "node-0")
    assert done.returncode == 0, done.stderr
    assert "top 10 words: the " in done.stdout
    result = json.loads(wc.result_path(work_dir).read_text())
    assert collections.Counter(result["counts"]) == independent_count(work_dir)
    assert result["local_reads"] == 8 and result["remote_reads"] == 4
    verify = subprocess.run([sys.executable, str(EXAMPLE / "wc.py"), "verify", "--work-dir", str(work_dir)],
                            capture_output=True, text=True, timeout=30)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.startswith("verify: OK: 48000 words") and "8/12 map reads local" in verify.stdout
    assert len(verify.stdout.splitlines()) == 1


def test_a_rerun_or_backup_of_a_map_overwrites_its_output_and_leaves_no_temporary_files(prepared):
    work_dir, job = prepared
    command = job.unit("map").command
    first = run_instance(command, 5, "node-0", attempt=1)
    again = run_instance(command, 5, "node-2", attempt=2)
    assert first.returncode == again.returncode == 0
    assert sorted(p.name for p in (work_dir / "out").iterdir()) == ["map-5.json"]
    assert json.loads((work_dir / "out" / "map-5.json").read_text())["attempt"] == 2


def test_a_map_reads_a_remote_copy_when_its_host_has_none_and_fails_without_any(prepared):
    work_dir, job = prepared
    holders = job.unit("map").data[0]
    stranger = next(h for h in ("node-0", "node-1", "node-2") if h not in holders)
    done = run_instance(job.unit("map").command, 0, stranger)
    assert done.returncode == 0 and f"read remotely from {holders[0]} on {stranger}" in done.stdout
    for host in holders:
        (work_dir / "data" / host / "shard-0.txt").unlink()
    done = run_instance(job.unit("map").command, 0, stranger)
    assert done.returncode != 0 and "no copy of the shard" in done.stderr


def test_a_corrupt_copy_is_skipped_for_a_good_one_and_the_map_fails_only_without_any(prepared):
    work_dir, job = prepared
    local, other = job.unit("map").data[1]
    (work_dir / "data" / local / "shard-1.txt").write_text("the the the\n")
    done = run_instance(job.unit("map").command, 1, local)
    assert done.returncode == 0 and "shard-1.txt is corrupt" in done.stderr
    assert f"read remotely from {other} on {local}" in done.stdout
    progress = [float(x) for x in re.findall(r"^FUXI_PROGRESS (\S+)$", done.stdout, re.MULTILINE)]
    assert progress == sorted(progress) and progress[-1] == 1.0            # never backwards
    assert json.loads((work_dir / "out" / "map-1.json").read_text())["counts"]["the"] > 3
    (work_dir / "data" / other / "shard-1.txt").write_text("the\n")
    (work_dir / "out" / "map-1.json").unlink()
    done = run_instance(job.unit("map").command, 1, local)
    assert done.returncode != 0 and "every copy of the shard is corrupt" in done.stderr
    assert not (work_dir / "out" / "map-1.json").exists()


def test_reduce_fails_while_a_map_output_is_missing(prepared):
    work_dir, job = prepared
    for index in range(11):
        assert run_instance(job.unit("map").command, index, "node-0").returncode == 0
    done = run_instance(job.unit("reduce").command, 0, "node-0")
    assert done.returncode != 0 and "no output of map instance(s) 11" in done.stderr
    assert not wc.result_path(work_dir).exists()


def test_verify_fails_on_a_wrong_count_or_no_result(prepared):
    work_dir, _ = prepared
    ok, summary = wc.verify(work_dir)
    assert not ok and "no " in summary
    for index in range(12):
        wc.run_map(work_dir, index, "node-1")
    result = wc.run_reduce(work_dir)
    result["counts"]["the"] += 1
    wc.write_json_atomically(wc.result_path(work_dir), result)
    ok, summary = wc.verify(work_dir)
    assert not ok and summary.startswith("verify: FAILED: 1 word(s) counted wrong: 'the'")


# ================================================================ end to end
def demo_command(work_dir: Path) -> list[str]:
    return [sys.executable, str(EXAMPLE / "demo.py"), "--work-dir", str(work_dir), "--timeout", "90"]


def processes_naming(work_dir: Path) -> dict[int, str]:
    """pid -> command line of the living processes whose command line or
    sandbox names the demo's work dir: its cluster, its scheduler, its tasks."""
    found = {pid: f"task {task_id}" for pid, task_id in task_processes(work_dir).items()}
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if entry.isdigit() and alive(int(entry)) and str(work_dir) in cmdline and int(entry) != os.getpid():
            found[int(entry)] = cmdline
    return found


def assert_nothing_left(work_dir: Path) -> None:
    """The demo stopped everything it started: no process of it is left."""
    wait_until(lambda: processes_naming(work_dir) == {}, 10, "the demo's processes to end",
               interval=0.1, diagnostics=lambda: repr(processes_naming(work_dir)))


@pytest.mark.timeout(150)
def test_the_demo_runs_the_job_on_a_local_cluster_and_verifies_it(tmp_path):
    work_dir = tmp_path / "demo"
    done = subprocess.run(demo_command(work_dir), cwd=REPO, env=child_env(), capture_output=True, text=True,
                          timeout=120)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    # authenticated end to end: the master (mesoslike local) and the Fuxi service's job clients
    assert re.search(r"^demo: fuxi scheduler .* serving jobs on .*; job clients authenticated$", output,
                     re.MULTILINE), output
    assert re.search(r"^  job-\d+ succeeded: 13/13 instances done", output, re.MULTILINE), output
    verified = re.search(r"^verify: OK: 48000 words, \d+ distinct, in 12 shards match a single-process count; "
                         r"(\d+)/12 map reads local", output, re.MULTILINE)
    assert verified, output
    # the scheduler places maps by their data: placing them blindly would read ~8 of 12 locally (2 of 3 nodes hold each)
    assert int(verified.group(1)) >= 10, output
    result = json.loads(wc.result_path(work_dir).read_text())
    assert collections.Counter(result["counts"]) == independent_count(work_dir)
    assert "stopped the Fuxi scheduler and the cluster; OK" in output
    assert_nothing_left(work_dir)


@pytest.mark.timeout(90)
def test_the_demo_stops_everything_on_ctrl_c(tmp_path):
    work_dir = tmp_path / "demo"
    proc = subprocess.Popen([*demo_command(work_dir), "--map-seconds", "20"], cwd=REPO, env=child_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        while not lines or not lines[-1].startswith("$ mesoslike fuxi submit"):   # cluster and scheduler up
            lines.append(proc.stdout.readline())
            assert lines[-1], "".join(lines)
        proc.send_signal(signal.SIGINT)
        output = "".join(lines) + proc.communicate(timeout=45)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, output
    assert "interrupted (SIGINT): stopping" in output and "stopped the Fuxi scheduler and the cluster" in output
    assert_nothing_left(work_dir)
