"""Drive a :class:`ServicesCore` by hand in tests: a fake clock, offers,
and a pretend cluster that answers launches and kills with status updates."""

from __future__ import annotations

import random
from typing import Iterable

from mesoslike import FakeClock, Offer, Resources, TaskState, TaskStatus
from mesoslike_frameworks.services.core import (Command, Decline, Kill, Launch, OffersReceived, Persist,
                                                ServicesCore, StatusUpdate, Tick)

START = 1_700_000_000.0


def offer(number: int, agent: str = "a1", resources: str = "cpus:4;mem:4096;disk:1000;ports:[31000-31099]",
          hostname: str | None = None, attributes: dict[str, str] | None = None) -> Offer:
    return Offer(id=f"o{number}", agent_id=agent, hostname=hostname or agent, resources=Resources.parse(resources),
                 attributes=attributes or {})


class Cluster:
    """A pretend cluster: agents with resources; launched tasks run (or
    fail) when told; kills end tasks KILLED. Every command the core gives is
    kept in ``log``; ``stored`` is what Persist wrote."""

    def __init__(self, core: ServicesCore | None = None, agents: Iterable[str] = ("a1", "a2", "a3"),
                 resources: str = "cpus:8;mem:8192;disk:1000;ports:[31000-31999]", seed: int = 1) -> None:
        self.clock = FakeClock(START)
        self.core = core or ServicesCore(self.clock, random.Random(seed))
        self.agents = {agent: resources for agent in agents}
        self.tasks: dict[str, str] = {}           # task id -> state (non-terminal)
        self.task_agent: dict[str, str] = {}
        self.task_resources: dict[str, Resources] = {}
        self.log: list[Command] = []
        self.stored: dict[str, bytes] = {}
        self.launched: list[str] = []            # every task id ever launched, in order
        self._offers = 0
        self.auto_run = True
        self.healthy: bool | None = None

    def run(self, commands: list[Command]) -> list[Command]:
        self.log += commands
        for command in commands:
            if isinstance(command, Persist):
                self.stored.update(command.records)
                for name in command.deleted:
                    self.stored.pop(name, None)
            elif isinstance(command, Launch):
                for task in command.tasks:
                    assert task.task_id not in self.task_agent, f"{task.task_id} launched twice"
                    self.tasks[task.task_id] = TaskState.STAGING
                    self.task_agent[task.task_id] = task.agent_id
                    self.task_resources[task.task_id] = task.resources
                    self.launched.append(task.task_id)
            elif isinstance(command, Kill):
                if command.task_id in self.tasks:
                    self.update(command.task_id, TaskState.KILLED)
        return commands

    def free(self, agent: str) -> Resources:
        total = Resources.parse(self.agents[agent])
        used = Resources.sum(self.task_resources[t] for t, a in self.task_agent.items()
                             if a == agent and t in self.tasks)
        return total - used

    def offer_all(self) -> list[Command]:
        offers = []
        for agent in sorted(self.agents):
            self._offers += 1
            offers.append(Offer(id=f"o{self._offers}", agent_id=agent, hostname=agent, resources=self.free(agent),
                                attributes={"rack": f"r{ord(agent[-1]) % 2}"}))
        commands = self.run(self.core.handle(OffersReceived(offers)))
        if self.auto_run:
            self.start_all()
        return commands

    def update(self, task_id: str, state: str, healthy: bool | None = None, reason: str = "") -> list[Command]:
        agent = self.task_agent.get(task_id, "")
        if state in (TaskState.FINISHED, TaskState.FAILED, TaskState.KILLED, TaskState.ERROR, TaskState.LOST,
                     TaskState.DROPPED, TaskState.GONE):
            self.tasks.pop(task_id, None)
        else:
            self.tasks[task_id] = state
        status = TaskStatus(task_id=task_id, state=state, agent_id=agent, healthy=healthy, reason=reason,
                            timestamp=self.clock.now())
        return self.run(self.core.handle(StatusUpdate(status)))

    def start_all(self, healthy: bool | None = None) -> None:
        for task_id, state in list(self.tasks.items()):
            if state == TaskState.STAGING:
                self.update(task_id, TaskState.RUNNING, healthy if healthy is not None else self.healthy)

    def tick(self, seconds: float = 1.0) -> list[Command]:
        self.clock.advance(seconds)
        return self.run(self.core.handle(Tick()))

    def settle(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            self.offer_all()
            self.tick(0.5)

    def do(self, commands: list[Command]) -> list[Command]:
        return self.run(commands)

    def running(self, app_id: str | None = None) -> list[str]:
        return [t for t, s in self.tasks.items() if s == TaskState.RUNNING
                and (app_id is None or t.startswith(app_id.strip("/").replace("/", "_") + ".instance-"))]

    def declined(self) -> int:
        return sum(1 for c in self.log if isinstance(c, Decline))


# ------------------------------------------------------------ end to end
import json as _json
import socket as _socket
import threading as _threading
import urllib.error as _urlerror
import urllib.request as _urlrequest


def api(url: str, method: str = "GET", body: object = None, token: str | None = None, timeout: float = 10.0
        ) -> tuple[int, object]:
    """(status, JSON answer) of a request to a service's REST API."""
    data = _json.dumps(body).encode() if body is not None else None
    request = _urlrequest.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with _urlrequest.urlopen(request, timeout=timeout) as answer:
            raw = answer.read()
            status = answer.status
    except _urlerror.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, _json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, raw.decode(errors="replace")


#: a web service with a health check: python's own HTTP server on its first host port
WEB_CMD = "exec python3 -m http.server $PORT0 --bind 127.0.0.1"


def web_app(app_id: str, instances: int, **extra: object) -> dict:
    """A small web app with an HTTP health check, quick to start and check."""
    document: dict = {"id": app_id, "cmd": WEB_CMD, "instances": instances, "cpus": 0.1, "mem": 48,
                      "healthChecks": [{"protocol": "HTTP", "path": "/", "portIndex": 0, "gracePeriodSeconds": 20,
                                        "intervalSeconds": 0.5, "timeoutSeconds": 2, "delaySeconds": 0.3,
                                        "maxConsecutiveFailures": 3}],
                      "backoffSeconds": 0.5, "upgradeStrategy": {"minimumHealthCapacity": 1.0,
                                                                 "maximumOverCapacity": 0.2}}
    document.update(extra)
    return document


def services_args(cluster, http_port: int, *extra: str) -> list[str]:
    """``mesoslike services serve`` against an e2e :class:`Cluster` (authenticated as fwA, API clients
    with the operator's token, tasks as this user)."""
    import getpass

    return ["services", "serve", "--master", cluster.address, "--http-port", str(http_port),
            "--key", cluster.client_key, "--master-key", cluster.master_key,
            "--credentials", str(cluster.keys.credentials), "--user", getpass.getuser(), "--drain-poll", "0.3",
            "--log-level", "info", *extra]


def wait_until_serving(proc, url: str, token: str | None, diagnostics, name: str = "the service",
                       leading: bool = True) -> None:
    """Wait until a started service answers ``/ping`` and, when ``leading`` (a standalone one), until it
    leads: its HTTP server answers ``/ping`` before its framework is started, and a change posted in
    between gets a 503 (CI run 91)."""
    from waiting import wait_until

    wait_until(lambda: not proc.running() or api(url + "/ping")[0] == 200, 30, f"{name} to serve",
               diagnostics=diagnostics)
    if leading:
        wait_until(lambda: not proc.running() or api(url + "/v2/leader", token=token)[0] == 200, 30,
                   f"{name} to lead", diagnostics=diagnostics)


def healthy_tasks(url: str, app_id: str, token: str | None) -> list[dict]:
    status, body = api(f"{url}/v2/apps{app_id}/tasks", token=token)
    if status != 200 or not isinstance(body, dict):
        return []
    return [t for t in body["tasks"] if t["state"] == "TASK_RUNNING"
            and any(r["alive"] for r in t.get("healthCheckResults", []))]


def read_events(url: str, path: str, token: str, wanted: int, into: list, ready: _threading.Event,
                until: str | None = None) -> None:
    """A raw HTTP/1.1 request for the event stream, read line by line as curl would: ``wanted``
    entries (the head and the events), or fewer once an event of kind ``until`` has come."""
    host, port = url.split("://")[1].split(":")
    with _socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n"
                     f"Authorization: Bearer {token}\r\n\r\n".encode())
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = sock.recv(65536)
            if not chunk:
                return
            buffer += chunk
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        into.append(("head", head.decode()))
        ready.set()
        while len(into) < wanted:
            while b"\n\n" in buffer and len(into) < wanted:
                block, buffer = buffer.split(b"\n\n", 1)
                fields = dict(line.split(": ", 1) for line in block.decode().splitlines() if ": " in line)
                if "event" in fields:
                    into.append((fields["event"], _json.loads(fields["data"])))
                    if fields["event"] == until:
                        return
            if len(into) >= wanted:
                return
            chunk = sock.recv(65536)
            if not chunk:
                return
            buffer += chunk
