"""``mesoslike task log``: print (or follow) what a task wrote to its
sandbox, wherever it ran.

The master's state names the task's agent and the agent's HTTP address;
the agent's ``/files/read`` serves the sandbox file (``docs/agent.rst``,
"HTTP"). A task the master no longer knows (its framework was removed — a
``mesoslike run`` that ended — or it is older than the master's memory of
ended tasks) is looked for in the agents' sandboxes, which stay for
``--gc-delay``. The helpers here are shared with ``mesoslike run``.

An agent with the cluster's credentials serves a sandbox only to a
principal the ``access_sandboxes`` ACL allows: the command sends the
caller's token (``--token``, ``MESOSLIKE_TOKEN``: a framework principal's
own, or an operator's) with every request to an agent.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Callable

import click

from mesoslike.cli.options import client_key_options, die, logging_option, option, timeout_option
from mesoslike.errors import MesoslikeError

__all__ = ["task", "locate_task", "sandbox_file", "read_file", "read_tail", "TaskLocation", "agent_token", "get_json",
           "AccessRefused"]


class AccessRefused(MesoslikeError):
    """An agent or master refused the caller's HTTP token (401 or 403)."""

#: seconds between reads when following
FOLLOW_INTERVAL = 0.5
#: seconds between looks at the master, when following, for whether the task ended
STATE_INTERVAL = 2.0


class TaskLocation:
    """Where a task ran: its framework, its record in the master's state
    (None when it was found in an agent's sandboxes), its agent's record."""

    def __init__(self, framework_id: str, task_id: str, task: dict | None, agent: dict | None,
                 token: str | None = None) -> None:
        self.framework_id = framework_id
        self.task_id = task_id
        self.task = task
        self.agent = agent
        self.token = token

    @property
    def http_address(self) -> str:
        return (self.agent or {}).get("http_address", "")

    @property
    def terminal(self) -> bool:
        """Has the task ended (as the master, or else its agent, says)?"""
        from mesoslike import TaskStatus

        if self.task is not None:
            return TaskStatus(task_id="", state=self.task["state"]).terminal
        try:
            live = get_json(f"{self.http_address}/state", 5.0, self.token).get("tasks", [])
        except MesoslikeError:
            return True
        return not any(t["id"] == self.task_id and t["framework_id"] == self.framework_id and
                       not TaskStatus(task_id="", state=t["state"]).terminal for t in live)


def agent_token() -> str | None:
    """The caller's token for agents' HTTP (``MESOSLIKE_TOKEN``), if any."""
    from mesoslike.credentials import TOKEN_ENV

    return os.environ.get(TOKEN_ENV) or None


def locate_task(doc: dict, task_id: str, framework_id: str | None = None, token: str | None = None) -> TaskLocation:
    """The task ``task_id`` in the master's state document (live or recently
    ended); :class:`MesoslikeError` if it is unknown or ambiguous. ``token``
    goes with every request to an agent."""
    found = []
    for framework in doc.get("frameworks", []):
        if framework_id is not None and framework["id"] != framework_id:
            continue
        for record in [*framework.get("tasks", []), *reversed(framework.get("completed_tasks", []))]:
            if record["id"] == task_id:
                found.append((framework["id"], record))
                break
    if not found:
        return _find_sandbox(doc, task_id, framework_id, token)
    if len(found) > 1:
        raise MesoslikeError(f"several frameworks have a task {task_id!r} ({', '.join(f for f, _ in found)}): "
                             "say which with --framework")
    framework, record = found[0]
    agent = next((a for a in doc.get("agents", []) if a["id"] == record["agent_id"]), None)
    return TaskLocation(framework, task_id, record, agent, token)


def _find_sandbox(doc: dict, task_id: str, framework_id: str | None, token: str | None) -> TaskLocation:
    """A task the master does not know: look for its sandbox on every agent."""
    from mesoslike.agent.executor import path_component

    found = []
    refused: list[str] = []
    for agent in doc.get("agents", []):
        address = agent.get("http_address")
        if not address:
            continue
        try:
            frameworks = [entry["path"] for entry in get_json(f"{address}/files/browse?path=", 5.0, token)]
        except AccessRefused:
            refused.append(agent.get("hostname") or address)
            continue
        except MesoslikeError:
            continue
        if framework_id is not None:
            frameworks = [f for f in frameworks if f == path_component(framework_id)]
        for framework in frameworks:
            query = urllib.parse.urlencode({"path": f"{framework}/{path_component(task_id)}"})
            try:
                get_json(f"{address}/files/browse?{query}", 5.0, token)
            except MesoslikeError:
                continue
            found.append((framework_id or framework, agent))
    where = f" of framework {framework_id}" if framework_id else ""
    if not found:
        blind = (f"; {len(refused)} agent(s) ({', '.join(refused[:3])}) refused to list their sandboxes to "
                 f"{'this token' if token else 'a caller without a token'} (--token, MESOSLIKE_TOKEN)"
                 if refused else "")
        raise MesoslikeError(f"no task {task_id!r}{where} is known to the master, and no agent has its sandbox "
                             f"(sandboxes of ended tasks are removed after the agents' --gc-delay){blind}")
    if len(found) > 1:
        places = ", ".join(f"{framework} on {agent['hostname']}" for framework, agent in found)
        raise MesoslikeError(f"sandboxes of a task {task_id!r} of several frameworks or agents were found "
                             f"({places}): say which with --framework")
    return TaskLocation(found[0][0], task_id, None, found[0][1], token)


def sandbox_file(framework_id: str, task_id: str, name: str) -> str:
    """The ``/files`` path of a task's sandbox file (``stdout``, ``stderr``)."""
    from mesoslike.agent.executor import path_component

    return f"{path_component(framework_id)}/{path_component(task_id)}/{name}"


def get_json(url: str, timeout: float, token: str | None = None) -> dict:
    """The JSON a GET of ``url`` answers (with ``token`` as bearer); MesoslikeError saying what went wrong."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        try:
            problem = json.loads(exc.read()).get("error", exc.reason)
        except ValueError:
            problem = exc.reason
        kind = AccessRefused if exc.code in (401, 403) else MesoslikeError
        raise kind(f"{url.split('?')[0]} answered {exc.code}: {problem}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise MesoslikeError(f"cannot read {url.split('?')[0]}: {exc}") from None


def read_file(http_address: str, path: str, offset: int = 0, timeout: float = 5.0,
              token: str | None = None) -> tuple[bytes, int]:
    """The bytes of a sandbox file from ``offset`` on (up to the agent's page
    size), and the offset after them."""
    query = urllib.parse.urlencode({"path": path, "offset": offset})
    reply = get_json(f"{http_address}/files/read?{query}", timeout, token)
    data = str(reply.get("data", "")).encode("utf-8", "surrogateescape")
    return data, int(reply.get("offset", offset)) + len(data)


def read_tail(http_address: str, path: str, lines: int = 10, timeout: float = 5.0,
              token: str | None = None) -> list[str]:
    """The last ``lines`` lines of a sandbox file (from its last 64 KiB)."""
    size = int(get_json(f"{http_address}/files/read?" + urllib.parse.urlencode({"path": path, "offset": -1}),
                         timeout, token)["offset"])
    data, _ = read_file(http_address, path, max(0, size - 64 * 1024), timeout, token)
    return data.decode("utf-8", "replace").splitlines()[-lines:] if lines > 0 else []


@click.group()
def task() -> None:
    """Look at tasks: what they printed."""


@task.command("log")
@option("", "--master", "master_address", required=True,
        help="The master: tcp://HOST:PORT, zk://HOST:PORT[,...]/PATH to ask the leader, or its http(s)://HOST:PORT.")
@option("task", "--framework", "framework_id", default=None, show_default="any",
        help="The task's framework id (needed when tasks of several frameworks have this id).")
@option("task", "--stderr", "stderr", is_flag=True, default=False, show_default="stdout",
        help="Print the task's stderr instead of its stdout.")
@option("task", "--follow", "-f", "follow", is_flag=True, default=False, show_default="off",
        help="Keep printing what the task writes until it has ended (or Ctrl-C).")
@timeout_option("task", "the master and the agent")
@option("", "--token", default=None, show_default="none",
        help="Your HTTP token (of the cluster's credentials file): an agent with credentials shows a framework's "
             "sandboxes only to the principals the access_sandboxes ACL allows (your own frameworks', by default).")
@client_key_options
@logging_option("task")
@click.argument("task_id")
def log(master_address: str, framework_id: str | None, stderr: bool, follow: bool, timeout: float,
        token: str | None, key: str | None, master_key: str | None, task_id: str) -> None:
    """Print what task TASK_ID wrote to its sandbox's stdout (or stderr),
    found through the master on whichever agent it ran."""
    from mesoslike.cli.state import fetch_state

    try:
        ask = functools.partial(fetch_state, master_address, timeout, key=key, master_key=master_key, token=token)
        where = locate_task(ask(), task_id, framework_id, token)
        if not where.http_address:
            agent = (where.task or {}).get("agent_id", "?")
            raise MesoslikeError(f"task {task_id} ran on agent {agent}, which is not registered any more (or serves "
                                 "no HTTP): its sandbox is on that machine, below the agent's --work-dir/sandboxes")
        path = sandbox_file(where.framework_id, task_id, "stderr" if stderr else "stdout")
        _print_file(ask, where, path, follow, timeout)
    except MesoslikeError as exc:
        die(str(exc))
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def _print_file(ask: Callable[[], dict], where: TaskLocation, path: str, follow: bool, timeout: float) -> None:
    """Print ``path`` from the task's agent; with ``follow``, until the task
    ended (``ask``: the master's state document)."""
    out = sys.stdout.buffer
    offset = 0
    ended = where.terminal
    next_state = time.monotonic() + STATE_INTERVAL
    while True:
        data, offset = read_file(where.http_address, path, offset, timeout, where.token)
        if data:
            out.write(data)
            out.flush()
            continue  # more may be waiting (a page at a time)
        if not follow or ended:
            return
        if time.monotonic() >= next_state:
            next_state = time.monotonic() + STATE_INTERVAL
            ended = locate_task(ask(), where.task_id, where.framework_id, where.token).terminal
            continue  # one more read after it ended: what it wrote last
        time.sleep(FOLLOW_INTERVAL)
