"""The operator's commands (docs/operations.rst): ``mesoslike task kill``,
``framework teardown``, ``agent drain``, ``agent reactivate``, ``reserve``
and ``unreserve``.

Each is a ``POST`` to the leading master's HTTP operator endpoint with the
operator's bearer token (``--token``, ``MESOSLIKE_TOKEN`` as ``mesoslike
local`` exports it). The master is found as ``mesoslike state`` finds it
(``tcp://`` or ``zk://``: its state names the leader's HTTP address), or
given as its ``http(s)://`` address. A refusal (unknown name 404,
not applicable 409, no token 401, no permission 403) is printed and the
command exits 1.
"""

from __future__ import annotations

from typing import Callable, cast

import click

from mesoslike.cli.master_client import leader_http, operate
from mesoslike.cli.options import client_key_options, die, logging_option, option, timeout_option, token_option
from mesoslike.errors import MesoslikeError

__all__ = ["operate", "call", "leader_http", "framework", "drain", "reactivate", "gone", "kill_task_command",
           "operator_options", "reserve", "unreserve"]


def operator_options(command: str) -> Callable:
    """``--master``, ``--token``, ``--timeout``, the client keys and ``--log-level`` of an operator command."""
    def apply(fn: Callable) -> Callable:
        for decorator in reversed([
            option("", "--master", "master_address", required=True,
                   help="The master: tcp://HOST:PORT or zk://HOST:PORT[,...]/PATH (its state names the leader's "
                        "HTTP address), or the leader's http(s)://HOST:PORT."),
            token_option,
            timeout_option(command),
            client_key_options,
            logging_option(command),
        ]):
            fn = decorator(fn)
        return fn
    return apply


def _run(master: str, path: str, request: dict | None, token: str | None, timeout: float, key: str | None,
         master_key: str | None) -> dict:
    """:func:`operate`, its answer an object; its error printed (exit 1)."""
    answer = call(master, path, request, token, timeout, key, master_key)
    if not isinstance(answer, dict):
        die(f"the master answered {path} with {type(answer).__name__}, not an object")
    return cast(dict, answer)


def call(master: str, path: str, request: dict | None, token: str | None, timeout: float, key: str | None,
         master_key: str | None) -> dict | list:
    """:func:`operate`; its error printed (exit 1)."""
    try:
        return operate(master, path, request, token, timeout, key, master_key)
    except MesoslikeError as exc:
        die(str(exc))
        raise AssertionError("unreachable") from None


@click.command("kill")
@operator_options("task")
@option("task", "--framework", "framework_id", default=None, show_default="any",
        help="The task's framework id (needed when tasks of several frameworks have this id).")
@click.argument("task_id")
def kill_task_command(master_address: str, token: str | None, timeout: float, key: str | None,
                      master_key: str | None, framework_id: str | None, task_id: str) -> None:
    """Kill task TASK_ID (POST /tasks/kill): its agent kills it and its
    framework hears TASK_KILLED, as for a kill of its own."""
    request = {"task_id": task_id, **({"framework_id": framework_id} if framework_id else {})}
    answer = _run(master_address, "/tasks/kill", request, token, timeout, key, master_key)
    click.echo(f"killing task {answer['task_id']} of framework {answer['framework_id']} "
               f"on agent {answer['agent_id']}")


@click.group()
def framework() -> None:
    """Operate on frameworks."""


@framework.command("teardown")
@operator_options("framework")
@click.argument("framework_id")
def teardown(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
             framework_id: str) -> None:
    """Tear framework FRAMEWORK_ID down (POST /frameworks/teardown): its
    tasks are killed, it is told and may not come back under its id, and it
    moves to the completed frameworks of /state."""
    answer = _run(master_address, "/frameworks/teardown", {"framework_id": framework_id}, token, timeout, key,
                  master_key)
    click.echo(f"framework {answer['framework_id']} ({answer['name']}) torn down; "
               f"{answer['tasks_killed']} task(s) killed")


@click.command("drain")
@operator_options("agent")
@option("agent", "--grace", type=click.FloatRange(min=0), default=0.0,
        help="Seconds the agent's tasks have to end on their own before they are killed.")
@click.argument("agent")
def drain(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
          grace: float, agent: str) -> None:
    """Drain agent AGENT, an id or a hostname (POST /agents/drain, Mesos's
    DRAIN_AGENT): no new offers for it; after --grace seconds its tasks still
    running are killed (TASK_KILLED); once none is left it is DRAINED. Until
    `mesoslike agent reactivate`."""
    answer = _run(master_address, "/agents/drain", {"agent": agent, "grace": grace}, token, timeout, key, master_key)
    state = (answer.get("drain_info") or {}).get("state", "?")
    click.echo(f"agent {answer['agent_id']} ({answer['hostname']}) {state}: no new offers; "
               + (f"its {answer['tasks']} task(s) are killed after {grace:g}s" if state == "DRAINING"
                  else "no task left"))


@click.command("reactivate")
@operator_options("agent")
@click.argument("agent")
def reactivate(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
               agent: str) -> None:
    """Offer a drained (or draining) agent AGENT again, an id or a hostname
    (POST /agents/reactivate, Mesos's REACTIVATE_AGENT)."""
    answer = _run(master_address, "/agents/reactivate", {"agent": agent}, token, timeout, key, master_key)
    click.echo(f"agent {answer['agent_id']} ({answer['hostname']}) reactivated (it was {answer['was']})")


@click.command("gone")
@operator_options("agent")
@click.argument("agent")
def gone(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
         agent: str) -> None:
    """Mark agent AGENT gone for good, an id or a hostname, registered or
    unreachable (POST /agents/gone, Mesos's MARK_AGENT_GONE): its tasks end
    TASK_GONE_BY_OPERATOR (TASK_LOST for frameworks that are not
    partition-aware), and it may not come back under its id."""
    answer = _run(master_address, "/agents/gone", {"agent": agent}, token, timeout, key, master_key)
    click.echo(f"agent {answer['agent_id']} ({answer['hostname']}, {answer['was']}) marked gone; "
               f"its {answer['tasks']} task(s) are gone")


@click.command("reserve")
@operator_options("reserve")
@option("reserve", "--label", "labels", multiple=True, metavar="KEY[=VALUE]",
        help="A label of the reservation (repeatable; Mesos's ReservationInfo.labels): part of the reserved "
             "kinds, cpus(analytics,ops,KEY=VALUE).")
@click.argument("agent")
@click.argument("resources")
def reserve(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
            labels: tuple[str, ...], agent: str, resources: str) -> None:
    """Reserve RESOURCES on agent AGENT (an id or a hostname) for the role
    they name, e.g. "cpus(analytics):2;mem(analytics):1024" (POST /reserve,
    Mesos's /master/reserve): a dynamic reservation by the operator's
    principal, kept in the registry and checkpointed by the agent."""
    body: dict[str, object] = {"agent_id": agent, "resources": resources}
    if labels:
        body["labels"] = [dict(zip(("key", "value"), label.split("=", 1))) for label in labels]
    answer = _run(master_address, "/reserve", body, token, timeout, key, master_key)
    click.echo(f"agent {answer['agent_id']} ({answer['hostname']}): reserved {answer['resources']}")


@click.command("unreserve")
@operator_options("unreserve")
@click.argument("agent")
@click.argument("resources")
def unreserve(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
              agent: str, resources: str) -> None:
    """Unreserve dynamically reserved RESOURCES on agent AGENT (POST
    /unreserve), written as /state shows them, e.g. "cpus(analytics,ops):2",
    or as `mesoslike reserve` took them, "cpus(analytics):2": the role's
    reservation by this operator."""
    answer = _run(master_address, "/unreserve", {"agent_id": agent, "resources": resources}, token, timeout, key,
                  master_key)
    click.echo(f"agent {answer['agent_id']} ({answer['hostname']}): {answer['unreserved']} unreserved "
               f"(now {answer['resources']})")
