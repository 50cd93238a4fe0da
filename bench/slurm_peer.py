"""A single-node Slurm beside mesoslike, for ``bench/throughput.py --peers slurm``.

Slurm (Debian's ``slurm-wlm`` 22.05 and ``munge``) is the batch system people
compare a task launcher with. This module sets one up the way a careful user
would for a one-machine test, on loopback only, entirely inside a work
directory of the benchmark's: its own munge daemon and key, ``slurmctld`` and
``slurmd`` from ``conf/slurm/slurm.conf.in``, free ports. It measures tasks
per second the way the other figures are measured: N tasks ``true``, each
with its own stdout and stderr files, from the submission to the moment the
last one has ended.

The tasks are one job array (``sbatch --array=1-N --wrap true``): the
cheapest way to give Slurm N tasks (N separate ``sbatch`` calls cost a
process and an RPC each besides). Two configurations:

``default``
    Slurm's own scheduling defaults.
``tuned``
    ``SchedulerParameters=batch_sched_delay=0,sched_min_interval=0`` (and
    ``default_queue_depth`` raised so one pass sees the whole array): the
    tuning a Slurm administrator would try first for many small jobs.

Run alone: ``python bench/slurm_peer.py --tasks 200`` (prints JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE.parent / "conf" / "slurm" / "slurm.conf.in"
#: the scheduling parameters of each configuration measured
CONFIGURATIONS = {
    "default": "",
    "tuned": "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=100000",
}
#: how often ``squeue`` is asked whether the array is done: each call is an
#: RPC slurmctld answers instead of scheduling (polling every 20 ms cost it a
#: fifth of its rate here); the error it adds is at most this, on ~10 s
POLL_INTERVAL = 0.25
#: the daemons and commands needed (Debian packages slurm-wlm, munge)
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scontrol")


class SlurmUnavailable(RuntimeError):
    """Slurm or munge is not installed, or does not start here."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def missing_programs() -> list[str]:
    return [name for name in PROGRAMS if shutil.which(name) is None]


class SingleNodeSlurm:
    """munged + slurmctld + slurmd on 127.0.0.1, all files under ``work``.
    A context manager: leaving it stops the daemons."""

    def __init__(self, work: Path, configuration: str = "default") -> None:
        missing = missing_programs()
        if missing:
            raise SlurmUnavailable(f"not installed: {', '.join(missing)} (Debian: apt-get install slurm-wlm munge)")
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        work.chmod(0o755)   # munged refuses a socket in a directory others cannot search
        for sub in ("state", "spool", "run", "log", "out"):
            (work / sub).mkdir(parents=True, exist_ok=True)
        self.conf = work / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.munge_socket = work / "run" / "munge.sock"
        self.ports = (_free_port(), _free_port())
        self.configuration = configuration
        self._daemons: list[subprocess.Popen] = []

    # ------------------------------------------------------------ lifecycle
    def __enter__(self) -> "SingleNodeSlurm":
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_conf(self) -> None:
        text = TEMPLATE.read_text().format(
            ctld_port=self.ports[0], slurmd_port=self.ports[1], munge_socket=self.munge_socket, work=self.work,
            scheduler_parameters=CONFIGURATIONS[self.configuration])
        self.conf.write_text(text)

    def _start(self) -> None:
        key = self.work / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        run, log = self.work / "run", self.work / "log"
        self._daemon(["munged", "--foreground", f"--key-file={key}", f"--socket={self.munge_socket}",
                      f"--pid-file={run / 'munged.pid'}", f"--log-file={log / 'munged.log'}",
                      f"--seed-file={run / 'munge.seed'}"])
        self._wait(lambda: self.munge_socket.exists(), 10, "munged's socket")
        self._write_conf()
        self._daemon(["slurmctld", "-D", "-i", "-f", str(self.conf)])
        self._daemon(["slurmd", "-D", "-f", str(self.conf)])
        self._wait(self._idle, 60, "the Slurm node to be idle")

    def _daemon(self, args: list[str]) -> None:
        out = open(self.work / "log" / f"{Path(args[0]).name}.out", "ab")
        try:
            self._daemons.append(subprocess.Popen(args, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                                  start_new_session=True))
        finally:
            out.close()

    def _idle(self) -> bool:
        done = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True, text=True)
        return done.returncode == 0 and done.stdout.strip() == "idle"

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            dead = [d.args[0] for d in self._daemons if d.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise SlurmUnavailable(f"{what}: {'exited: ' + ', '.join(dead) if dead else 'timed out'}\n"
                                       + self.tail())
            time.sleep(0.05)

    def reconfigure(self, configuration: str) -> None:
        """Switch scheduling parameters (``scontrol reconfigure``)."""
        self.configuration = configuration
        self._write_conf()
        subprocess.run(["scontrol", "reconfigure"], env=self.env, check=True, capture_output=True)
        self._wait(self._idle, 30, "the node after reconfiguring")

    def tail(self, chars: int = 1500) -> str:
        texts = []
        for path in sorted((self.work / "log").glob("*")):
            texts.append(f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(texts)

    def close(self) -> None:
        for daemon in reversed(self._daemons):
            if daemon.poll() is None:
                os.killpg(daemon.pid, signal.SIGTERM)
        for daemon in reversed(self._daemons):
            try:
                daemon.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)
                daemon.wait()
        self._daemons.clear()
        self._kill_step_daemons()

    def _kill_step_daemons(self) -> None:
        """Kill the step daemons (``slurmstepd``) this node's slurmd started and the job
        processes they ran: each step daemon runs in a session of its own and
        outlives slurmd (hundreds of them after a job array), its job with it.
        Known by the SLURM_CONF they inherited (the daemons' and sbatch's): only ours."""
        marker = f"SLURM_CONF={self.conf}".encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                continue   # gone meanwhile

    # ---------------------------------------------------------- measuring
    def run_array(self, tasks: int, command: str = "true", timeout: float = 1800.0) -> float:
        """Seconds from submitting ``tasks`` x ``command`` (a job array, each
        task's stdout/stderr in its own files) until none is left in the queue."""
        out = self.work / "out" / f"array-{time.monotonic_ns()}"
        out.mkdir()
        started = time.perf_counter()
        submitted = subprocess.run(["sbatch", "--parsable", f"--array=1-{tasks}", "-o", f"{out}/%a.out",
                                    "-e", f"{out}/%a.err", "--wrap", command], env=self.env, capture_output=True,
                                   text=True)
        if submitted.returncode != 0:
            raise SlurmUnavailable(f"sbatch failed: {submitted.stderr.strip()}\n{self.tail()}")
        job = submitted.stdout.strip().split(";")[0]
        deadline = time.monotonic() + timeout
        while True:
            queued = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i"], env=self.env, capture_output=True,
                                    text=True)
            if queued.returncode == 0 and not queued.stdout.strip():
                break
            if time.monotonic() > deadline:
                raise SlurmUnavailable(f"job {job} not done in {timeout:g} s\n{self.tail()}")
            time.sleep(POLL_INTERVAL)
        elapsed = time.perf_counter() - started
        outputs = len(list(out.glob("*.out")))
        if outputs != tasks:
            raise SlurmUnavailable(f"job {job}: {outputs} of {tasks} tasks left an output file\n{self.tail()}")
        shutil.rmtree(out, ignore_errors=True)
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-slurm-"))
    rates: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
    try:
        with SingleNodeSlurm(work) as slurm:
            for _ in range(args.rounds):
                for name in CONFIGURATIONS:
                    slurm.reconfigure(name)
                    rates[name].append(round(args.tasks / slurm.run_array(args.tasks), 1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"tasks": args.tasks, "tasks_per_s": rates}))


if __name__ == "__main__":
    main()
