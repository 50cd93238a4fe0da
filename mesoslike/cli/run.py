"""``mesoslike run``: a one-shot command framework (like ``mesos-execute``)."""

from __future__ import annotations

import shlex
import sys
import time

import click

from mesoslike.cli.options import die, logging_option, option
from mesoslike.errors import MesoslikeError
from mesoslike.resources import Resources

__all__ = ["run"]

_STREAM_LIMIT = 10  # stream every status change for up to this many instances
_TTY_PERIOD = 0.1   # seconds between two progress lines on a terminal


class _Reporter:
    """Prints status changes (few instances) and a progress line (many)."""

    def __init__(self, instances: int, tty: bool) -> None:
        self.stream = instances <= _STREAM_LIMIT
        self.tty = tty
        self.last_line = ""
        self.last_print = 0.0

    def __call__(self, progress, status) -> None:
        if status is not None and self.stream:
            detail = f" ({status.message})" if status.message else ""
            self._clear()
            click.echo(f"{status.task_id} on {status.agent_id or '?'}: {status.state}{detail}")
        # at most 10 progress lines a second on a terminal (unless it streams
        # each change), 1 otherwise: a 100k-task job must not spend its time
        # drawing (issue 14); the last line always
        now = time.monotonic()
        if not progress.done and now - self.last_print < (_TTY_PERIOD if self.tty else 1.0) and (
                not self.stream or not self.tty):
            return
        line = f"[{_bar(progress)}] {progress.summary()}"
        if line != self.last_line:
            self.last_line, self.last_print = line, now
            if self.tty:
                click.echo("\r" + line, nl=False)
            elif not self.stream or progress.done:
                click.echo(line)

    def _clear(self) -> None:
        if self.tty and self.last_line:
            click.echo("\r" + " " * len(self.last_line) + "\r", nl=False)
            self.last_line = ""

    def close(self) -> None:
        if self.tty and self.last_line:
            click.echo()


def _bar(progress, width: int = 20) -> str:
    done = (progress.finished + progress.failed) * width // max(progress.instances, 1)
    return "#" * done + "." * (width - done)


@click.command(context_settings={"allow_interspersed_args": False})
@option("", "--master", "master_address", required=True,
        help="The master: tcp://HOST:PORT, or zk://HOST:PORT[,...]/PATH to follow the leader.")
@option("run", "--cpus", type=click.FloatRange(min=0, min_open=True), default=0.1, help="CPUs per instance.")
@option("run", "--mem", type=click.FloatRange(min=0, min_open=True), default=32.0, help="Memory (MB) per instance.")
@option("run", "--instances", type=click.IntRange(min=1), default=1, help="How many instances of the command.")
@option("run", "--role", default="*", help="Role the framework runs in.")
@option("run", "--name", default="run", help="Framework and task name.")
@option("run", "--timeout", type=click.FloatRange(min=0, min_open=True), default=None, show_default="none",
        help="Give up (kill the tasks, exit 124) after this many seconds.")
@logging_option("run")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(master_address, cpus, mem, instances, role, name, timeout, command) -> None:
    """Run COMMAND (after --) as task instances on the cluster, show their
    progress, and exit 0 if all finished, else with a failed instance's exit
    code (1 if it had none)."""
    from mesoslike import SchedulerDriver
    from mesoslike.frameworks.command import CommandScheduler, framework_info

    shell_command = command[0] if len(command) == 1 else shlex.join(command)
    reporter = _Reporter(instances, sys.stdout.isatty())
    scheduler = CommandScheduler(shell_command, Resources(cpus=cpus, mem=mem), instances, name, reporter)
    try:
        driver = SchedulerDriver(scheduler, framework_info(name, role), master_address)
    except MesoslikeError as exc:
        die(str(exc))
    driver.start()
    try:
        ended = _wait(scheduler, driver, timeout)
    except KeyboardInterrupt:
        ended = False
    if ended and not scheduler.finished.is_set():  # the driver gave up (it said why through error())
        reporter.close()
        for message in scheduler.errors:
            click.echo(f"error: {message}", err=True)
        die(f"the scheduler driver ended ({driver.join(10).value}) before the tasks did")
    if not ended:
        driver.stop()  # tears the framework down: the master kills its tasks
        driver.join(10)
        reporter.close()
        click.echo(f"gave up: {scheduler.progress.summary()}", err=True)
        raise SystemExit(124 if timeout else 130)
    driver.join(10)
    reporter.close()
    for message in scheduler.errors:
        click.echo(f"error: {message}", err=True)
    click.echo(f"done: {scheduler.progress.summary()}")
    raise SystemExit(scheduler.exit_code())


def _wait(scheduler, driver, timeout: float | None) -> bool:
    """True once every instance ended or the driver stopped on its own (it
    could not reach the master, say); False when ``timeout`` ran out."""
    from mesoslike import DriverStatus

    deadline = float("inf") if timeout is None else time.monotonic() + timeout
    while not scheduler.finished.wait(max(0.0, min(0.5, deadline - time.monotonic()))):
        if driver.status is not DriverStatus.RUNNING:
            return True
        if time.monotonic() >= deadline:
            return False
    return True
