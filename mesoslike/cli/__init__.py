"""The ``mesoslike`` command line (click): one module per group of commands."""

from __future__ import annotations

import click

from mesoslike import __version__
from mesoslike.cli.cluster import agent, decommission, local, master
from mesoslike.cli.fuxi import fuxi
from mesoslike.cli.images import images
from mesoslike.cli.keys import keys
from mesoslike.cli.operations import drain, framework, gone, kill_task_command, reactivate, reserve, unreserve
from mesoslike.cli.quota import quota, weights
from mesoslike.cli.run import run
from mesoslike.cli.services import app, deployment, services
from mesoslike.cli.simulate import simulate
from mesoslike.cli.state import state
from mesoslike.cli.task import task

__all__ = ["main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="mesoslike")
def main() -> None:
    """mesoslike: a Mesos-style two-level cluster manager with Fuxi scheduling semantics."""


for command in (master, agent, local, run, state, task, framework, simulate, fuxi, keys, reserve, unreserve, quota,
                weights, services, app, deployment):
    main.add_command(command)
# the operator's commands (docs/operations.rst)
task.add_command(kill_task_command)
agent.add_command(drain)
agent.add_command(reactivate)
agent.add_command(images)   # docs/containers.rst, "Images"
agent.add_command(decommission)   # the agent's own leaving (SIGUSR1), not the master's drain
agent.add_command(gone)
