"""Starting supervisors cheaply: a fork server.

Every task runs under a supervisor process (:mod:`mesoslike.agent.supervisor`)
started as ``python -I -S supervisor.py RUN_DIR``: an interpreter start per
task, ~40 ms of CPU on the project's VM, which held a 4-agent cluster to
~20-35 tasks/s where spawning the commands directly ran ~850/s (issue 14).
:class:`SupervisorLauncher` keeps one ``supervisor.py --launcher`` process
per agent (:func:`~mesoslike.agent.supervisor.serve_launches`) that has the
supervisor's code loaded and *forks* a supervisor per request. What the
supervisor is and does is unchanged: the same code, environment, log file,
its own session, the files of its run directory; it outlives the agent and
the launcher alike, and a restarted agent finds it from ``supervisor.json``
as before. The agent watches it with a pidfd (it is not the agent's child).

The launcher is started on first use and again if it died; if it cannot be
started the executor starts supervisors itself, as before.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import IO, Mapping

__all__ = ["SupervisorLauncher", "LauncherError", "LaunchRefused"]

log = logging.getLogger("mesoslike.agent")

#: the launcher's own environment: not the agent's (which may hold the operator's keys and tokens); each
#: supervisor it forks gets the environment of its request
_LAUNCHER_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}


class LauncherError(OSError):
    """The launcher took a request and died before answering: whether a
    supervisor was started is not known (the launch fails; not retried, so
    a task never gets two supervisors)."""


class LaunchRefused(OSError):
    """The launcher could not start the supervisor as asked (the kernel
    refused its PID namespace); nothing was started."""


class SupervisorLauncher:
    """A ``supervisor.py --launcher`` child of the agent (see the module
    docstring). Not thread-safe: the agent's loop thread uses it."""

    def __init__(self, python: str, script: str) -> None:
        self.python = python
        self.script = script
        self._process: subprocess.Popen | None = None
        self.started = 0   # launcher processes started (1 unless one died)
        self._submitted = 0   # requests submitted whose answers are not collected yet
        self._lost = False    # the launcher ended after taking some of them: replaced once they are collected

    def start(self, run_dir: Path, env: Mapping[str, str], log_file: Path, pid_namespace: bool = False) -> int | None:
        """Fork a supervisor for ``run_dir`` (with ``pid_namespace``: the
        first process of a PID namespace of its own); its pid. None if no
        launcher runs or it would not take the request (nothing was
        started: the caller starts the supervisor itself). Raises
        :class:`LauncherError` if it took the request and gave no answer,
        :class:`LaunchRefused` if it could not fork as asked."""
        if not self.submit(run_dir, env, log_file, pid_namespace):
            return None
        (answer,) = self.collect()
        if isinstance(answer, OSError):
            raise answer
        return answer

    def submit(self, run_dir: Path, env: Mapping[str, str], log_file: Path, pid_namespace: bool = False) -> bool:
        """Ask for a supervisor for ``run_dir`` (as :meth:`start`) without
        waiting for the answer: the launcher forks it while the caller
        prepares the next task, and :meth:`collect` reads the answers of
        all the requests submitted since the last (the launcher writes them
        together once it has no request left to read: one round trip a
        batch, not one a task). False if no launcher runs or it would not
        take the request (nothing was started: the caller starts the
        supervisor itself; the answers of the requests it took before are
        still collected)."""
        if self._submitted and self._lost:
            return False   # the launcher of this batch ended: the rest of it start their supervisors themselves
        process = self._running()
        if process is None:
            return False
        assert process.stdin is not None
        request = json.dumps({"run_dir": str(run_dir), "env": dict(env), "log": str(log_file),
                              "pid_namespace": pid_namespace}).encode() + b"\n"
        try:
            process.stdin.write(request)
            process.stdin.flush()
        except OSError:
            if self._submitted:
                self._lost = True   # its answers to what it took are read by collect()
            else:
                self._stopped(process)
            return False
        self._submitted += 1
        return True

    def collect(self) -> list[int | OSError]:
        """The answers to the requests :meth:`submit` made since the last
        call, in their order: a supervisor's pid, :class:`LaunchRefused`
        (nothing started for it), or :class:`LauncherError` (the launcher
        ended before answering: whether a supervisor was started is not
        known)."""
        count, self._submitted = self._submitted, 0
        lost, self._lost = self._lost, False
        process = self._process
        answers: list[int | OSError] = []
        if not count or process is None:
            return answers
        assert process.stdout is not None
        while len(answers) < count:
            answer = process.stdout.readline()
            if answer.startswith(b"!"):
                answers.append(LaunchRefused(
                    f"the supervisor could not be started: {answer[1:].decode('utf-8', 'replace').strip()}"))
                continue
            try:
                answers.append(int(answer))
            except ValueError:
                lost = True
                answers += [LauncherError(f"the supervisor launcher ended before answering ({answer[:80]!r})")] * \
                    (count - len(answers))
        if lost:
            self._stopped(process)
        return answers

    def _running(self) -> subprocess.Popen | None:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        if process is not None and self._submitted:
            self._lost = True   # what it answered to this batch is still to be read (collect)
            return None
        if process is not None:
            self._stopped(process)
        try:
            self._process = subprocess.Popen(
                [self.python, "-I", "-S", self.script, "--launcher"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        except OSError as exc:
            log.warning("cannot start the supervisor launcher (supervisors are started one by one): %s", exc)
            return None
        self.started += 1
        return self._process

    def _stopped(self, process: subprocess.Popen) -> None:
        log.warning("the supervisor launcher (pid %d) ended; a new one is started for the next task", process.pid)
        self._close_pipes(process)
        self._process = None

    @staticmethod
    def _close_pipes(process: subprocess.Popen) -> None:
        pipes: list[IO[bytes] | None] = [process.stdin, process.stdout]
        for pipe in pipes:
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        """Let the launcher go (it ends at the end of its input); the
        supervisors it started run on."""
        process, self._process = self._process, None
        if process is not None:
            self._close_pipes(process)
