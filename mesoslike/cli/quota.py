"""``mesoslike quota set|get|remove`` and ``mesoslike weights set|get``
(docs/cluster.rst, "Weights and quota"): the operator's ``POST /quota``,
``POST /weights`` and their reads ``GET /quota``, ``GET /weights``, at the
leading master's HTTP, with the operator's token as for the operations of
:mod:`mesoslike.cli.operations`."""

from __future__ import annotations

import json

import click

from mesoslike.cli.operations import call, operator_options
from mesoslike.cli.options import die, option

__all__ = ["quota", "weights", "format_quota", "format_weights"]


def _table(rows: list[list[str]], header: list[str]) -> list[str]:
    from mesoslike.cli.state import table

    return table(rows, header)


def format_quota(configs: list[dict]) -> str:
    """GET /quota's configs as a table: role, guarantee, limit, consumed."""
    if not configs:
        return "no role has quota"
    return "\n".join(_table([[c["role"], c.get("guarantee") or "-", c.get("limit") or "-", c.get("consumed") or "-"]
                             for c in configs], ["role", "guarantee", "limit", "consumed"]))


def format_weights(weights: list[dict]) -> str:
    """GET /weights as a table (roles not listed weigh 1)."""
    if not weights:
        return "every role weighs 1 (no weight set)"
    return "\n".join(_table([[w["role"], f"{w['weight']:g}"] for w in weights], ["role", "weight"]))


@click.group()
def quota() -> None:
    """Set, show and remove roles' quota: a guarantee (resources set aside
    for the role first) and a limit (never more)."""


@quota.command("set")
@operator_options("quota")
@option("quota", "--guarantee", default=None, show_default="none", metavar="RESOURCES",
        help='What the role is guaranteed, e.g. "cpus:4;mem:8192".')
@option("quota", "--limit", default=None, show_default="none", metavar="RESOURCES",
        help='The most the role may hold, e.g. "cpus:16;gpus:0".')
@option("quota", "--force", is_flag=True, default=False, show_default="off",
        help="Set it even with a resource name no agent offers, or a guarantee beyond the cluster's capacity.")
@click.argument("role")
def quota_set(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
              guarantee: str | None, limit: str | None, force: bool, role: str) -> None:
    """Set ROLE's quota (POST /quota): its guarantee, its limit, or both
    (what is left out is cleared). Unknown resource names are refused with
    the name they look like (cpu: did you mean cpus?), and a guarantee the
    cluster cannot hold unless --force."""
    if guarantee is None and limit is None:
        raise click.UsageError("give --guarantee, --limit or both (`mesoslike quota remove ROLE` clears the quota)")
    request: dict[str, object] = {"role": role}
    if guarantee is not None:
        request["guarantee"] = guarantee
    if limit is not None:
        request["limit"] = limit
    if force:
        request["force"] = True
    call(master_address, "/quota", request, token, timeout, key, master_key)
    click.echo(f"quota of role {role}: guarantee {guarantee or 'none'}, limit {limit or 'none'}")


@quota.command("get")
@operator_options("quota")
@option("quota", "--json", "as_json", is_flag=True, default=False, show_default="off",
        help="Print GET /quota's document.")
@click.argument("role", required=False)
def quota_get(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
              as_json: bool, role: str | None) -> None:
    """Show the roles' quota (GET /quota): guarantee, limit and what each
    role's subtree consumes now; only ROLE's if given."""
    answer = call(master_address, "/quota", None, token, timeout, key, master_key)
    configs = answer.get("configs", []) if isinstance(answer, dict) else []
    if role is not None:
        configs = [c for c in configs if c.get("role") == role]
        if not configs and not as_json:
            die(f"role {role} has no quota")
    click.echo(json.dumps({"configs": configs}, indent=2) if as_json else format_quota(configs))


@quota.command("remove")
@operator_options("quota")
@click.argument("role")
def quota_remove(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
                 role: str) -> None:
    """Clear ROLE's quota, guarantee and limit (POST /quota with neither)."""
    call(master_address, "/quota", {"role": role}, token, timeout, key, master_key)
    click.echo(f"quota of role {role} removed")


@click.group()
def weights() -> None:
    """Set and show role weights: a role of weight 2 is offered twice the
    share of one of weight 1 (weighted DRF)."""


def _weight(text: str) -> tuple[str, float]:
    role, sep, value = text.rpartition("=")
    try:
        if not sep or not role:
            raise ValueError
        return role, float(value)
    except ValueError:
        raise click.BadParameter(f"{text!r} is not ROLE=WEIGHT (e.g. eng=2)") from None


@weights.command("set")
@operator_options("weights")
@click.argument("weights", nargs=-1, required=True, metavar="ROLE=WEIGHT...")
def weights_set(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
                weights: tuple[str, ...]) -> None:
    """Set the weights of roles (POST /weights), e.g. eng=2 batch=0.5;
    other roles keep theirs."""
    wanted = dict(_weight(text) for text in weights)
    call(master_address, "/weights", wanted, token, timeout, key, master_key)
    click.echo("weights set: " + ", ".join(f"{role} {weight:g}" for role, weight in wanted.items()))


@weights.command("get")
@operator_options("weights")
@option("weights", "--json", "as_json", is_flag=True, default=False, show_default="off",
        help="Print GET /weights's document.")
def weights_get(master_address: str, token: str | None, timeout: float, key: str | None, master_key: str | None,
                as_json: bool) -> None:
    """Show the role weights set (GET /weights); other roles weigh 1."""
    answer = call(master_address, "/weights", None, token, timeout, key, master_key)
    listed = answer if isinstance(answer, list) else []
    click.echo(json.dumps(listed, indent=2) if as_json else format_weights(listed))
