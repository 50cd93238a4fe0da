#!/usr/bin/env python3
"""A Fuxi job's own processes alone — its AppMaster and its workers, no
cluster — and the CPU each spends an instance, for this tree and, with
``--before-tree``, another tree in interleaved rounds.

What the Fuxi path costs beyond what the real agents' path costs is these
processes: the AppMaster (started as the tree's service starts it — its
``appmaster_argv``, else ``python -m mesoslike_frameworks.fuxi.appmaster`` —: its job document, snapshot, keys, token),
one worker per slot (started with the task command the service gives its
slots — this tree's, so a change of that command is measured — with the
environment, token and secret key files the agents' sandboxes give them),
and the instances the workers start. A stand-in service (a ROUTER of this
tree on 127.0.0.1) answers each of the AppMaster's requests ``OK``; nothing
else runs. Per round: seconds from the start of the processes to the
AppMaster's exit (after ``JOB_ENDED``), and each process's CPU (user +
system, from ``/proc`` when it exited, before it is reaped): the
AppMaster's, the workers' own, and their reaped children's (the
instances'); the load average.

    python bench/fuxi_job_alone.py --before-tree /tmp/base --rounds 6 --out bench/results/fuxi_job_alone.json
    python bench/fuxi_job_alone.py --also-slots 4 --rounds 6 --out bench/results/fuxi_job_alone-slots.json

``--also-slots N`` runs this tree's job on N slots too, in the same rounds: what a job with fewer worker
processes (one a machine serving several slots) would save in the workers, and what it costs the AppMaster.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
import throughput as tp  # noqa: E402

from mesoslike.transport import Server  # noqa: E402
from mesoslike_frameworks.fuxi import am_protocol as amp  # noqa: E402
from mesoslike_frameworks.fuxi import protocol  # noqa: E402
from mesoslike_frameworks.fuxi.service import JobKeys  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")
TOKEN = "bench-job-token"


class StandInService:
    """The service's job server as an AppMaster sees it: every request answered OK."""

    def __init__(self) -> None:
        self.server = Server(f"tcp://127.0.0.1:{tp.free_port()}", codec=protocol.CODEC)
        self.address = self.server.address
        self.requests: dict[str, int] = {}
        self.ended = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            self.server.wait(0.05)
            for peer, frame in self.server.receive_frames():
                if peer is None or isinstance(frame, Exception):
                    continue
                request = protocol.decode(frame)
                self.requests[request.TYPE] = self.requests.get(request.TYPE, 0) + 1
                self.server.send(peer, protocol.Ok(request.id))
                if isinstance(request, protocol.JobEnded):
                    self.ended.set()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.server.close()


def worker_command(python: str, tree: Path) -> str:
    """The task command the tree's service gives a slot's worker."""
    probe = ("import sys\nfrom mesoslike_frameworks.fuxi import service\n"
             "command = getattr(service, 'worker_command', None)\n"
             "print(command(sys.argv[1]) if command else f'exec {sys.argv[1]} -m {service.WORKER_MODULE}')")
    return subprocess.run([python, "-c", probe, python], cwd=tree, check=True, capture_output=True,
                          text=True).stdout.strip()


def appmaster_argv(python: str, tree: Path) -> list[str]:
    """How the tree's service starts an AppMaster, before its options (``python -m`` the module before
    ``appmaster_argv``)."""
    probe = ("import json, sys\nfrom mesoslike_frameworks.fuxi import service\n"
             "argv = getattr(service, 'appmaster_argv', None)\n"
             "print(json.dumps(argv(sys.argv[1]) if argv else [sys.argv[1], '-m', service.APPMASTER_MODULE]))")
    return json.loads(subprocess.run([python, "-c", probe, python], cwd=tree, check=True, capture_output=True,
                                     text=True).stdout)


def _exited_cpu(pid: int) -> tuple[float, float]:
    """Once ``pid`` (a child) exited, before it is reaped: its own CPU seconds and its reaped children's."""
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / TICKS
    children = (int(fields[13]) + int(fields[14])) / TICKS
    os.waitpid(pid, 0)
    return own, children


def one_job(python: str, tree: Path, command: str, instances: int, slots: int, work: Path,
            start: list[str] | None = None) -> dict:
    job_dir = Path(tempfile.mkdtemp(dir=work))
    document = {"job": {"name": "alone", "units": [{"name": "work", "slots": slots, "cpus": 0.1, "mem": 64,
                                                    "instances": instances, "command": "true"}]}}
    (job_dir / "job.json").write_text(json.dumps(document))
    keys = JobKeys.of(job_dir)
    service = StandInService()
    bind = f"tcp://127.0.0.1:{tp.free_port()}"
    argv = [*(start or [python, "-m", "mesoslike_frameworks.fuxi.appmaster"]), "--service", service.address,
            "--job-id", "job-0001", "--bind", bind, "--snapshot", str(job_dir / "snapshot.json"),
            "--job", str(job_dir / "job.json"), "--log-level", "info", "--key", str(keys.appmaster_secret_path),
            f"--worker-key={keys.worker.public.decode()}"]
    base_env = {name: value for name, value in os.environ.items() if not name.startswith("FUXI_")}
    sandboxes = []
    for i in range(slots):
        sandbox = job_dir / f"slot-{i}"
        sandbox.mkdir()
        for name, value in ((".fuxi_worker_token", amp.worker_token(TOKEN, f"job-0001.work.{i}")),
                            (".fuxi_worker_key_secret", keys.worker.secret.decode())):
            (sandbox / name).write_text(value)
            (sandbox / name).chmod(0o400)
        sandboxes.append(sandbox)
    started = time.perf_counter()
    with open(job_dir / "appmaster.log", "wb") as log_file:
        appmaster = subprocess.Popen(argv, cwd=tree, env={**base_env, "FUXI_AM_TOKEN": TOKEN}, stdout=log_file,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    workers = []
    for i, sandbox in enumerate(sandboxes):
        env = {**base_env, "FUXI_APPMASTER": bind, "FUXI_SLOT_ID": f"job-0001.work.{i}", "FUXI_JOB_ID": "job-0001",
               "FUXI_UNIT": "work", "FUXI_HOSTNAME": f"h{i % 4}", "FUXI_ROOM": "", "MESOS_SANDBOX": str(sandbox),
               "FUXI_WORKER_TOKEN_FILE": ".fuxi_worker_token",
               "FUXI_WORKER_SECRET_KEY_FILE": ".fuxi_worker_key_secret",
               "FUXI_WORKER_PUBLIC_KEY": keys.worker.public.decode(),
               "FUXI_APPMASTER_KEY": keys.appmaster.public.decode()}
        with open(sandbox / "stderr", "wb") as err:
            workers.append(subprocess.Popen(["/bin/sh", "-c", command], cwd=sandbox, env=env, stdout=err,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
    try:
        appmaster_cpu = _exited_cpu(appmaster.pid)[0]
        elapsed = time.perf_counter() - started
        # the service kills a job's slots when it ends: a worker not released by then (one that started after
        # the job's instances were all done, on a loaded machine) would wait for its AppMaster for minutes
        deadline = time.monotonic() + 2.0
        running = list(workers)
        while running and time.monotonic() < deadline:
            running = [w for w in running if os.waitid(os.P_PID, w.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None]
            time.sleep(0.02)
        for worker in running:
            worker.terminate()
        worker_cpu = [_exited_cpu(worker.pid) for worker in workers]
        if not service.ended.is_set() or appmaster.returncode not in (None, 0):
            raise SystemExit(f"the job did not end well ({tree}): "
                             f"{(job_dir / 'appmaster.log').read_text(errors='replace')[-2000:]}")
    finally:
        for proc in [appmaster, *workers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        service.close()
        shutil.rmtree(job_dir, ignore_errors=True)
    return {"seconds": elapsed, "appmaster": appmaster_cpu, "workers": sum(own for own, _ in worker_cpu),
            "instances": sum(children for _, children in worker_cpu)}


def interleaved_rounds(trees: dict[str, tuple[str, Path]], rounds: int, run: Callable[[str, str, Path], dict],
                       describe: Callable[[str, dict], str]) -> tuple[dict[str, list[dict]], list[list[float]]]:
    """``rounds`` rounds of ``run(name, python, tree)`` for every tree, their order reversed every other round
    (what runs first in a round shares the machine with what ran before it), each round logged with
    ``describe(name, result)`` of every tree: the results by tree, and the load average at each round's start."""
    results: dict[str, list[dict]] = {name: [] for name in trees}
    loads: list[list[float]] = []
    for r in range(rounds):
        loads.append([round(x, 2) for x in os.getloadavg()])
        order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
        for name, (python, tree) in order:
            results[name].append(run(name, python, tree))
        tp.log(f"round {r + 1}: " + ", ".join(describe(name, results[name][-1]) for name in trees)
               + f", load {loads[-1]}")
    return results, loads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--before-tree", type=Path, default=None,
                        help="a source tree to compare with, with its virtualenv in .venv")
    parser.add_argument("--also-slots", type=int, default=None, metavar="N",
                        help="also run this tree's job on N slots (N workers: what fewer worker processes a job "
                             "would save, and cost), as 'slots_N', in the same interleaved rounds")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    doc, started, load_start = benchlib.start("fuxi_job_alone", None, {"git_head": benchlib.git_state([])[0]})
    trees = benchlib.trees(ROOT, args.before_tree, doc)
    slots = {name: args.slots for name in trees}
    if args.also_slots is not None:
        name = f"slots_{args.also_slots}"
        trees[name], slots[name] = trees["after"], args.also_slots
    commands = {name: worker_command(python, tree) for name, (python, tree) in trees.items()}
    starts = {name: appmaster_argv(python, tree) for name, (python, tree) in trees.items()}
    work = Path(tempfile.mkdtemp(prefix="bench-fuxi-job-alone-"))
    try:
        results, loads = interleaved_rounds(
            trees, args.rounds,
            lambda name, python, tree: one_job(python, tree, commands[name], args.instances, slots[name], work,
                                               starts[name]),
            lambda name, result: f"{name} {result['seconds']:.2f} s, cpu ms an instance " + ", ".join(
                f"{kind} {1000 * result[kind] / args.instances:.2f}" for kind in ("appmaster", "workers", "instances")))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc.update({"instances": args.instances, "slots": slots, "worker_commands": commands,
                "loadavg_per_round": loads})
    for name in trees:
        doc[name] = {"instances_per_s": tp.spread([args.instances / x["seconds"] for x in results[name]]),
                     "cpu_ms_per_instance": {
                         kind: tp.spread([1000 * x[kind] / args.instances for x in results[name]])
                         for kind in ("appmaster", "workers", "instances")},
                     # the same in µs (the ms figures' one decimal hides an AppMaster's changes of ~10-50 µs)
                     "cpu_us_per_instance": {
                         kind: tp.spread([1e6 * x[kind] / args.instances for x in results[name]])
                         for kind in ("appmaster", "workers", "instances")},
                     "cpu_ms_per_instance_all": tp.spread([1000 * (x["appmaster"] + x["workers"] + x["instances"])
                                                           / args.instances for x in results[name]])}
    for base in [name for name in trees if name != "after"]:
        key = "after_of_before_percent" if base == "before" else f"{base}_of_after_percent"
        first, second = ("after", base) if base == "before" else (base, "after")
        doc[key] = {
            "cpu_appmaster": tp.spread([100 * a["appmaster"] / b["appmaster"]
                                        for a, b in zip(results[first], results[second])]),
            "cpu_workers": tp.spread([100 * a["workers"] / b["workers"]
                                      for a, b in zip(results[first], results[second])]),
            "cpu_all": tp.spread([100 * (a["appmaster"] + a["workers"] + a["instances"])
                                  / (b["appmaster"] + b["workers"] + b["instances"])
                                  for a, b in zip(results[first], results[second])]),
            "seconds": tp.spread([100 * a["seconds"] / b["seconds"]
                                  for a, b in zip(results[first], results[second])])}
    benchlib.finish(doc, started, load_start, args.out, tp.log, None)


if __name__ == "__main__":
    main()
