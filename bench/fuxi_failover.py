#!/usr/bin/env python3
"""Fuxi scheduler failover: seconds from ``kill -9`` of the leading ``fuxi
serve --zk`` to the next leader serving job clients, and to a running job
getting slots again — over several kills, with their median.

Everything real, on 127.0.0.1: one ZooKeeper server (Debian's package, as
``tests/zk_helpers.py`` starts it: tick 200 ms), ``mesoslike local
--insecure`` (a master and 2 agents), and two ``mesoslike fuxi serve --zk
... --zk-session-timeout S`` processes sharing a work dir. For each kill:

1. the bench submits a job of two units: ``a`` (3 slots, 3 instances of
   ``sleep 2``) and ``b`` after it (2 slots, 2 instances) — ``b`` can only
   run on slots the *next* leader grants: ``a`` ends after the kill and
   before the dead leader's ZooKeeper session does;
2. once every ``a`` instance runs, it kills the leading service's process
   group with SIGKILL (t = 0) and records, on the wall clock:

``detect_s``      a ZooKeeper watch in the bench (``make_locator``) sees
                  another leader: the dead one's session expired, at most
                  ``S`` after it last pinged (the floor no scheduler can go
                  under; the baseline of this run)
``serving_s``     the first answer to ``status`` from the new leader (an
                  in-process ``JobClient`` on ``zk://``, asking every 50 ms;
                  it follows the leader through ZooKeeper)
``registered_s``  the first ``status`` saying the new leader is registered
                  with the master (it re-subscribed as the same framework)
``cli_s``         ``mesoslike fuxi status --fuxi zk://... JOB`` (its default
                  ``--timeout`` of 10 s) started at
                  t = 0 (as a user would type it) exits 0; ``cli_live_s``
                  is the same command against the live leader before the
                  job (the command's own cost, measured in the same run)
``continued_s``   the job's first ``b`` instance starts (its worker launched
                  on a slot the new leader granted, connected to the job's
                  AppMaster, which kept running through the failover)

and checks the job: it succeeds, every instance ran exactly once (attempt 1:
no running worker was lost). The killed service is started again as the
standby; the next kill hits the other one.

The goal (issue 25): the new leader serves within the session timeout + 1 s
(``serving_s <= S + 1``). Progress on stderr; one JSON document on stdout
(and ``--out``). It reports; it never fails on slow numbers.

    python bench/fuxi_failover.py --out bench/results/fuxi_failover.json   # 5 kills, ~2 min
    python bench/fuxi_failover.py --kills 1                                # quick
    python bench/fuxi_failover.py --baseline-python /tmp/main/.venv/bin/python   # main's services first

``--baseline-python`` measures the services (and the ``fuxi status`` CLI of
``cli_s``) of another installation first, in the same run; ``serving_s``
is always asked by this checkout's in-process client.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))            # run from a checkout without installing
sys.path.insert(0, str(ROOT / "tests"))  # the ZooKeeper server helper
sys.path.insert(0, str(HERE))

from benchlib import blob_ids, finish, git_state, start, wait  # noqa: E402

CODE_FILES = ["frameworks/mesoslike_frameworks/fuxi/service.py", "frameworks/mesoslike_frameworks/fuxi/jobs.py",
              "frameworks/mesoslike_frameworks/fuxi/appmaster.py",
              "frameworks/mesoslike_frameworks/fuxi/cli.py", "mesoslike/driver/core.py", "mesoslike/ha/zookeeper.py",
              "bench/fuxi_failover.py"]
#: how often the in-process client asks the status (the timings' resolution)
POLL_S = 0.05
#: how long an instance of unit ``a`` runs: the leader dies while they run, and they end before
#: its successor is elected (any session timeout above it), so ``b`` waits for the new leader
A_SECONDS = 2.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def job_document(runs: Path) -> dict:
    def command(unit: str, seconds: float) -> str:
        return (f"echo start {unit} $FUXI_INSTANCE $FUXI_ATTEMPT $(date +%s.%N) >> {runs}; sleep {seconds}; "
                f"echo end {unit} $FUXI_INSTANCE $FUXI_ATTEMPT $(date +%s.%N) >> {runs}")
    return {"job": {"name": "failover", "backup": {"enabled": False}, "units": [
        {"name": "a", "slots": 3, "cpus": 0.1, "mem": 32, "instances": 3, "command": command("a", A_SECONDS)},
        {"name": "b", "after": ["a"], "slots": 2, "cpus": 0.1, "mem": 32, "instances": 2,
         "command": command("b", 0.2)}]}}


def run_lines(runs: Path) -> list[list[str]]:
    return [line.split() for line in runs.read_text().splitlines()] if runs.exists() else []


class Services:
    """ZooKeeper, ``mesoslike local`` and two ``fuxi serve --zk`` processes."""

    def __init__(self, directory: Path, session: float, python: str) -> None:
        from zk_helpers import ZooKeeperServer, free_port

        # the processes run the mesoslike ``python`` has installed (this checkout's, or a baseline's):
        # from the scratch directory, so that `python -m` does not find this checkout's first
        self.directory, self.session, self.python = directory, session, python
        self.zookeeper = ZooKeeperServer(directory / "zookeeper")
        self.zookeeper.start()
        self.url = self.zookeeper.url("/bench-fuxi")
        self.procs: dict[str, subprocess.Popen] = {}
        self.master_port = free_port()
        self._start("local", ["local", "--insecure", "--agents", "2", "--resources", "cpus:4;mem:4096",
                              "--port", str(self.master_port), "--http-port", str(free_port()),
                              "--work-dir", str(directory / "cluster"), "--log-level", "info"])
        self.ports = {"fuxi-a": free_port(), "fuxi-b": free_port()}
        for name in self.ports:
            self.serve(name)

    def _start(self, name: str, args: list[str]) -> None:
        out = open(self.directory / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen([self.python, "-m", "mesoslike", *args], stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True, cwd=self.directory)

    def serve(self, name: str) -> None:
        self._start(name, ["fuxi", "serve", "--master", f"tcp://127.0.0.1:{self.master_port}", "--port",
                           str(self.ports[name]), "--work-dir", str(self.directory / "work"), "--zk", self.url,
                           "--zk-session-timeout", str(self.session), "--log-level", "info"])

    def role(self, name: str) -> str:
        """``leader``, ``standby`` or ``down`` (no answer) of one service, asked at its own port."""
        from mesoslike import MesoslikeError
        from mesoslike_frameworks.fuxi.service import STANDBY_REFUSAL, JobClient, JobRefused

        try:
            with JobClient(f"tcp://127.0.0.1:{self.ports[name]}", timeout=1.0) as client:
                client.status()
            return "leader"
        except JobRefused as exc:
            return "standby" if str(exc) == STANDBY_REFUSAL else "down"
        except MesoslikeError:
            return "down"

    def kill(self, name: str) -> None:
        os.killpg(self.procs[name].pid, signal.SIGKILL)
        self.procs[name].wait()

    def close(self) -> None:
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        # AppMasters outlive their service by design (--failover-timeout): end the ones this run left (by pid)
        from test_fuxi_service import kill_appmasters

        kill_appmasters(self.directory / "work")
        self.zookeeper.stop()


def cli_status(services: Services, job_id: str) -> float:
    """Seconds until ``mesoslike fuxi status --fuxi zk://... [JOB]`` answers (exit 0)."""
    began = time.time()
    done = subprocess.run([services.python, "-m", "mesoslike", "fuxi", "status", "--fuxi", services.url,
                           *([job_id] if job_id else [])], capture_output=True, text=True,
                          timeout=120, cwd=services.directory)
    if done.returncode != 0:
        raise RuntimeError(f"fuxi status failed: {done.stderr[-500:]}")
    return time.time() - began


def one_kill(services: Services, number: int) -> dict:
    from mesoslike import make_locator
    from mesoslike_frameworks.fuxi.service import JobClient

    leader = wait(lambda: next((n for n in services.ports if services.role(n) == "leader"), None), 60,
                  "leading service")
    standby = next(n for n in services.ports if n != leader)
    wait(lambda: services.role(standby) == "standby", 60, "standby")
    runs = services.directory / f"runs-{number}.txt"
    client = JobClient(services.url, timeout=0.5)
    generation = client.status()["framework"].get("generation")
    cli_live_s = cli_status(services, "")
    leader_address = f"tcp://127.0.0.1:{services.ports[leader]}"
    detected: list[float] = []
    locator: Any = None

    def changed() -> None:
        current = locator.current() if locator is not None else None
        if current and current != leader_address and not detected:
            detected.append(time.time() - t0)
    locator = make_locator(services.url, on_change=changed)
    timings: dict[str, float] = {}
    cli_result: list[float] = []
    job_id = client.submit(job_document(runs))
    wait(lambda: sum(r[0] == "start" and r[1] == "a" for r in run_lines(runs)) >= 3, 60, "every a instance to run",
         interval=0.01)
    t0 = time.time()
    services.kill(leader)
    def ask_cli() -> None:
        try:
            cli_result.append(cli_status(services, job_id))
        except (RuntimeError, subprocess.SubprocessError) as exc:
            log(f"kill {number}: the CLI's status failed: {exc}")
    cli = threading.Thread(target=ask_cli, daemon=True)
    cli.start()
    log(f"kill {number}: killed {leader} (t = 0)")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            document = client.status(job_id)
        except Exception:  # noqa: BLE001 - no answer yet: the point of the measurement
            document = None
        now = time.time() - t0
        if document is not None and document["framework"].get("generation") != generation:
            timings.setdefault("serving_s", now)
            if document["framework"].get("registered"):
                timings.setdefault("registered_s", now)
        b_starts = [float(r[4]) - t0 for r in run_lines(runs) if r[0] == "start" and r[1] == "b"]
        if b_starts:
            timings["continued_s"] = min(b_starts)
        if "registered_s" in timings and "continued_s" in timings:
            break
        time.sleep(POLL_S)
    locator.close()
    ended = wait(lambda: (lambda j: j if j["state"] != "running" else None)(client.status(job_id)["jobs"][0]), 90,
                 "the job to end", interval=0.2)
    client.close()
    cli.join(120)
    lines = run_lines(runs)
    starts = sorted((r[1], r[2], r[3]) for r in lines if r[0] == "start")
    expected = sorted([("a", str(i), "1") for i in range(3)] + [("b", str(i), "1") for i in range(2)])
    a_ends = [float(r[4]) - t0 for r in lines if r[0] == "end" and r[1] == "a"]
    result = {"killed": leader, "detect_s": detected[0] if detected else None, **timings,
              "cli_s": cli_result[0] if cli_result else None, "cli_live_s": cli_live_s,
              "a_ended_s": max(a_ends) if a_ends else None, "job_state": ended["state"],
              "every_instance_ran_once": starts == expected, "instances_lost": max(0, len(starts) - len(expected))}
    log(f"kill {number}: " + ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}"
                                       for k, v in result.items()))
    services.serve(leader)   # back as the standby
    return result


def summary(kills: list[dict], session: float) -> dict:
    out: dict = {}
    for key in ("detect_s", "serving_s", "registered_s", "cli_s", "cli_live_s", "continued_s"):
        values = [k[key] for k in kills if isinstance(k.get(key), float)]
        if values:
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    serving = [k["serving_s"] for k in kills if isinstance(k.get("serving_s"), float)]
    out["serving_minus_session_median_s"] = statistics.median(serving) - session if serving else None
    out["goal_serving_within_session_plus_1s"] = bool(serving) and len(serving) == len(kills) \
        and all(s <= session + 1.0 for s in serving)
    out["all_jobs_succeeded_with_every_instance_once"] = all(
        k["job_state"] == "succeeded" and k["every_instance_ran_once"] for k in kills)
    return out


def measure(args: argparse.Namespace, python: str) -> list[dict]:
    """``args.kills`` failovers of services run by ``python`` (its mesoslike)."""
    directory = Path(tempfile.mkdtemp(prefix="bench-fuxi-failover-"))
    log(f"scratch directory {directory}")
    services = Services(directory, args.zk_session_timeout, python)
    kills: list[dict] = []
    try:
        for number in range(1, args.kills + 1):
            kills.append(one_kill(services, number))
    finally:
        services.close()
        if not args.keep:
            subprocess.run(["rm", "-rf", str(directory)], check=False)
    return kills


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=5, help="failovers to measure (default 5)")
    parser.add_argument("--zk-session-timeout", type=float, default=5.0,
                        help="the services' --zk-session-timeout (default 5, as bench/failover.py's masters)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter that runs mesoslike")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (logs)")
    parser.add_argument("--baseline-python", default=None,
                        help="first measure services run by this interpreter (one whose mesoslike is the code to "
                             "compare with: main's, say), then --python's, in the same run")
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON document here")
    args = parser.parse_args(argv)
    head, dirty = git_state(CODE_FILES)
    doc, started, load = start("fuxi failover: kill -9 of the leading `fuxi serve --zk` -> the next leader serves "
                               "and a running job gets slots again", argv,
                               {"git_head": head, "git_blobs": blob_ids(CODE_FILES),
                                "product_files_differ_from_head": dirty})
    doc["config"] = {"zk_session_timeout_s": args.zk_session_timeout, "kills": args.kills,
                     "zookeeper": "one standalone server (Debian package), tickTime 200 ms, on 127.0.0.1",
                     "cluster": "mesoslike local --insecure, 2 agents of cpus:4;mem:4096",
                     "services": 2, "status_poll_s": POLL_S}
    runs = [("baseline", args.baseline_python)] if args.baseline_python else []
    runs.append(("measured", args.python))
    for label, python in runs:
        version = subprocess.run([python, "-c", "import mesoslike, os; print(mesoslike.__version__, "
                                  "os.path.dirname(mesoslike.__file__))"], capture_output=True, text=True,
                                 cwd=tempfile.gettempdir()).stdout.strip()
        log(f"{label}: services run by {python} ({version})")
        kills = measure(args, python)
        result = {"python": python, "mesoslike": version, "kills": kills,
                  "summary": summary(kills, args.zk_session_timeout)}
        if label == "baseline":
            doc["baseline"] = result
            log(f"baseline: {json.dumps(result['summary'])}")
        else:
            doc.update(result)
    log(json.dumps(doc["summary"]))
    finish(doc, started, load, args.out, log, code_changed=git_state(CODE_FILES)[1] != dirty)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
