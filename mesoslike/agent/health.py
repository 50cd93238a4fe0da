"""A task's health checking (Mesos's ``HealthCheck``), run by the task's
supervisor (:mod:`.supervisor`), not by the agent: the supervisor owns the
task and outlives the agent, so a task keeps being checked — and an
unhealthy one killed — while its agent restarts, and no agent has to reach
into another process's sandbox or switch users to run a check.

Standard library only, like the supervisor, which loads this file by its
path (it runs as ``python -I -S``: no package imports) and only for a task
that has a check.

- :class:`HealthPolicy`: the decisions, pure (times in, verdicts out): when
  the next check is due, what a result does to the task's health, and when
  the task must be killed. As Mesos: the first check ``delay_seconds``
  after the task started, then every ``interval_seconds``; failures within
  ``grace_period_seconds`` of the start do not count until a check passed;
  ``consecutive_failures`` counted failures in a row kill the task.
- :func:`run_check`: one check — ``COMMAND`` (``/bin/sh -c`` as the task's
  user, in its sandbox, with its environment, in its container: the
  supervisor that runs it is in the task's namespaces, and a task with an
  image is checked with ``runc exec`` in its root filesystem; healthy on
  exit status 0),
  ``HTTP`` (a GET to ``127.0.0.1:port``; healthy on a status in
  ``statuses``, by default 200-399) or ``TCP`` (a connection to
  ``127.0.0.1:port`` is accepted) — bounded by ``timeout_seconds``.
- :class:`HealthChecker`: the thread that runs them; it writes the task's
  health to ``health.json`` in the run directory when it changes (the agent
  reads it: a TASK_RUNNING update with ``healthy``) and tells the supervisor
  to kill the task.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import signal
import socket
import ssl
import subprocess
import threading
import time

__all__ = ["HEALTH_FILE", "HealthPolicy", "Verdict", "run_check", "HealthChecker"]

#: in the run directory: ``{"healthy": bool | null, "message": str, "changes": int}``
HEALTH_FILE = "health.json"
#: what of a command check's output is kept for the message (bytes, its end)
OUTPUT_KEPT = 512
SHELL = "/bin/sh"


class Verdict:
    """What a check's result means: ``healthy`` (None: nothing changed, the
    result did not count), ``changed`` (the task's health flipped, or was
    learnt for the first time: an update is due), ``kill`` (a message: the
    task must be killed for it)."""

    __slots__ = ("healthy", "changed", "kill")

    def __init__(self, healthy: bool | None, changed: bool, kill: str = "") -> None:
        self.healthy, self.changed, self.kill = healthy, changed, kill


class HealthPolicy:
    """The decisions of one task's health checking, with no I/O.

    :param check: the ``HealthCheck`` as a dict (its wire form).
    :param started: when the task started (monotonic seconds).
    """

    def __init__(self, check: dict, started: float) -> None:
        self.check = check
        self.started = started
        self.delay = float(check.get("delay_seconds", 15.0))
        self.interval = float(check.get("interval_seconds", 10.0))
        self.timeout = float(check.get("timeout_seconds", 20.0))
        self.limit = int(check.get("consecutive_failures", 3))
        self.grace = float(check.get("grace_period_seconds", 10.0))
        self.healthy: bool | None = None
        self.succeeded = False
        self.failures = 0
        self.next_due = started + self.delay

    def result(self, now: float, ok: bool, why: str) -> Verdict:
        """A check ended at ``now``; the next is due ``interval`` later."""
        self.next_due = now + self.interval
        if ok:
            self.succeeded = True
            self.failures = 0
            changed = self.healthy is not True
            self.healthy = True
            return Verdict(True, changed)
        if not self.succeeded and now - self.started < self.grace:
            return Verdict(None, False)   # still starting: not counted (Mesos's grace period)
        self.failures += 1
        changed = self.healthy is not False
        self.healthy = False
        if self.failures >= self.limit:
            return Verdict(False, changed, f"{describe(self.check)} failed {self.failures} times in a row "
                                           f"(consecutive_failures {self.limit}); last: {why}")
        return Verdict(False, changed)


def describe(check: dict) -> str:
    """A check in a few words (as ``HealthCheck.describe``)."""
    kind = check.get("type")
    if kind == "HTTP":
        http_check = check.get("http") or {}
        return (f"HTTP check {http_check.get('scheme', 'http')}://127.0.0.1:{http_check.get('port')}"
                f"{http_check.get('path', '/')}")
    if kind == "TCP":
        return f"TCP check 127.0.0.1:{(check.get('tcp') or {}).get('port')}"
    return f"command check {check.get('command')!r}"


# ------------------------------------------------------------- the checks
def run_check(check: dict, *, cwd: str, env: dict, user: object = None,
              stop: threading.Event | None = None, children: object = None,
              prefix: list[str] | tuple[str, ...] = ()) -> tuple[bool, str]:
    """Run one check; (passed, why it failed or ""). ``children``: the
    supervisor's registry of children that are not orphans (when it is its
    PID namespace's init and reaps them); ``prefix``: what a command check
    runs through (``runc exec …`` for a task with an image)."""
    timeout = float(check.get("timeout_seconds", 20.0))
    kind = check.get("type")
    try:
        if kind == "TCP":
            return _tcp_check(int(check["tcp"]["port"]), timeout)
        if kind == "HTTP":
            return _http_check(check["http"], timeout)
        return _command_check(str(check["command"]), timeout, cwd, env, user, stop, children, prefix)
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError) as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _tcp_check(port: int, timeout: float) -> tuple[bool, str]:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout):
            return True, ""
    except socket.timeout:
        return False, f"no connection to 127.0.0.1:{port} within {timeout:g} s"
    except OSError as exc:
        return False, f"connection to 127.0.0.1:{port} failed: {exc.strerror or exc}"


def _http_check(spec: dict, timeout: float) -> tuple[bool, str]:
    port, path, scheme = int(spec["port"]), str(spec.get("path") or "/"), spec.get("scheme", "http")
    statuses = spec.get("statuses") or []
    if scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=timeout, context=ssl._create_unverified_context())  # noqa: S323 - as Mesos
    else:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    url = f"{scheme}://127.0.0.1:{port}{path}"
    try:
        connection.request("GET", path, headers={"User-Agent": "mesoslike-health-check"})
        status = connection.getresponse().status
    except socket.timeout:
        return False, f"GET {url}: no answer within {timeout:g} s"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"GET {url} failed: {getattr(exc, 'strerror', None) or exc or type(exc).__name__}"
    finally:
        connection.close()
    ok = status in statuses if statuses else 200 <= status < 400
    return (True, "") if ok else (False, f"GET {url} answered {status}")


class _NoChildren:
    """No registry: a supervisor that is not an init reaps no orphans."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.own: set[int] = set()


def _command_check(command: str, timeout: float, cwd: str, env: dict, user: object,
                   stop: threading.Event | None, children: object = None,
                   prefix: list[str] | tuple[str, ...] = ()) -> tuple[bool, str]:
    registry = children if children is not None else _NoChildren()
    # as the task's user (the supervisor is root then): Popen switches in the child, before exec;
    # in an image's container, runc exec switches (``prefix`` names the user)
    identity = {} if user is None or prefix else {"user": user.uid, "group": user.gid,  # type: ignore[attr-defined]
                                                  "extra_groups": user.groups}  # type: ignore[attr-defined]
    with registry.lock:   # type: ignore[attr-defined]
        child = subprocess.Popen([*prefix, SHELL, "-c", command], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True,
                                 start_new_session=True, **identity)
        registry.own.add(child.pid)   # type: ignore[attr-defined]
    try:
        return _watch_check(child, timeout, stop)
    finally:
        registry.own.discard(child.pid)   # type: ignore[attr-defined]


def _watch_check(child: subprocess.Popen, timeout: float, stop: threading.Event | None) -> tuple[bool, str]:
    assert child.stdout is not None
    deadline = time.monotonic() + timeout
    kept = b""
    fd = child.stdout.fileno()
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                timed_out = left <= 0
                break
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                data = os.read(fd, 65536)
                if not data:
                    break
                kept = (kept + data)[-OUTPUT_KEPT:]   # bounded, whatever the check writes
        if not timed_out and not (stop is not None and stop.is_set()):
            try:
                child.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        if child.returncode is None:
            try:
                os.killpg(child.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            child.wait()
        child.stdout.close()
    if timed_out:
        return False, f"the command did not end within {timeout:g} s"
    if child.returncode == 0:
        return True, ""
    output = kept.decode("utf-8", "replace").strip()
    how = (f"killed by signal {-child.returncode}" if child.returncode < 0
           else f"exited with status {child.returncode}")
    return False, f"the command {how}" + (f": {output}" if output else "")


# ------------------------------------------------------------- the thread
class HealthChecker:
    """Runs a task's checks in a thread of the supervisor.

    :param check: the ``HealthCheck`` (a dict).
    :param run_dir: where ``health.json`` is written.
    :param cwd, env, user: how a command check runs (the task's sandbox,
        environment and user — a ``TaskUser`` or None).
    :param children: the supervisor's :class:`~.supervisor.Children`, when
        it is its PID namespace's init (a check's command is not an orphan).
    :param prefix: what a command check runs through (``runc exec``).
    :param enter: called first on the checker's thread (an image task with
        a network of its own: ``setns`` into it, for HTTP and TCP checks).
    :param write: writes a JSON document whole (the supervisor's
        ``write_json_atomically``).
    :param on_kill: called with a message when the task must be killed.
    :param say: the supervisor's log.
    """

    def __init__(self, check: dict, run_dir: str, *, cwd: str, env: dict, user: object, write, on_kill,
                 say, children: object = None, prefix: list[str] | tuple[str, ...] = (), enter=None) -> None:
        self.policy = HealthPolicy(check, time.monotonic())
        self.path = os.path.join(run_dir, HEALTH_FILE)
        self.cwd, self.env, self.user = cwd, env, user
        self.children, self.prefix = children, tuple(prefix)
        self.enter = enter
        self.write, self.on_kill, self.say = write, on_kill, say
        self.stop_event = threading.Event()
        self.changes = 0
        self.thread = threading.Thread(target=self.loop, name="health-checker", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(2.0)

    def loop(self) -> None:
        policy = self.policy
        if self.enter is not None:
            try:
                self.enter()   # this thread into the task's network namespace: HTTP and TCP checks reach it
            except OSError as exc:
                self.say(f"the health checks cannot enter the task's network namespace: {exc}")
        while not self.stop_event.wait(max(0.0, policy.next_due - time.monotonic())):
            ok, why = run_check(policy.check, cwd=self.cwd, env=self.env, user=self.user, stop=self.stop_event,
                                children=self.children, prefix=self.prefix)
            if self.stop_event.is_set():
                return
            verdict = policy.result(time.monotonic(), ok, why)
            if verdict.changed:
                self.changes += 1
                message = "health check passed" if verdict.healthy else f"{describe(policy.check)} failed: {why}"
                self.say(f"task {'healthy' if verdict.healthy else 'unhealthy'}: {message}")
                try:
                    self.write(self.path, {"healthy": verdict.healthy, "message": message, "changes": self.changes})
                except OSError as exc:   # a full disk: the kill below still happens
                    self.say(f"cannot write {self.path}: {exc}")
            if verdict.kill:
                self.say(f"killing the task: {verdict.kill}")
                self.on_kill(verdict.kill)
                return


def read_health(path: str) -> tuple[int, bool | None, str] | None:
    """``health.json``: (changes, healthy, message), None if absent or unreadable."""
    try:
        with open(path, "rb") as source:
            document = json.loads(source.read())
        changes, healthy, message = document["changes"], document["healthy"], document["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(changes, int) or healthy not in (True, False, None) or not isinstance(message, str):
        return None
    return changes, healthy, message[:1024]
