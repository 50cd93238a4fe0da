"""The ``mesoslike`` command line (click): one module per group of commands.

:data:`main` is a registry of commands, loaded lazily: the platform's own
(:data:`BUILT_IN`, modules of this package) and those other distributions
declare in the ``mesoslike.commands`` entry points (:mod:`mesoslike.plugins`)
— the bundled frameworks' ``fuxi``, ``run``, ``services``, ``app`` and
``deployment`` among them, so that nothing here imports a framework. A
command's module is imported only when that command runs (or ``--help``
lists them all): ``mesoslike run`` does not import the master.
"""

from __future__ import annotations

import faulthandler
import importlib
import io
import os
import signal
import sys
import threading

import click

from mesoslike import __version__

__all__ = ["main", "BUILT_IN", "CommandRegistry"]

#: the platform's commands: name -> "module:attribute"
BUILT_IN = {
    "master": "mesoslike.cli.cluster:master",
    "agent": "mesoslike.cli.cluster:agent",
    "local": "mesoslike.cli.cluster:local",
    "state": "mesoslike.cli.state:state",
    "task": "mesoslike.cli.task:task",
    "framework": "mesoslike.cli.operations:framework",
    "simulate": "mesoslike.cli.simulate:simulate",
    "keys": "mesoslike.cli.keys:keys",
    "reserve": "mesoslike.cli.operations:reserve",
    "unreserve": "mesoslike.cli.operations:unreserve",
    "quota": "mesoslike.cli.quota:quota",
    "weights": "mesoslike.cli.quota:weights",
}
#: subcommands that live in other modules than their group's
SUBCOMMANDS = {
    "task": ["mesoslike.cli.operations:kill_task_command"],   # the operator's commands (docs/operations.rst)
    "agent": ["mesoslike.cli.operations:drain", "mesoslike.cli.operations:reactivate",
              "mesoslike.cli.images:images",   # docs/containers.rst, "Images"
              "mesoslike.cli.cluster:decommission",   # the agent's own leaving (SIGUSR1), not the master's drain
              "mesoslike.cli.operations:gone"],   # an unreachable agent the operator says is gone for good
}


def _end_process(code: int) -> None:
    """End the process now with ``code``, if nothing else wants the
    interpreter's ordinary exit: a thread it would wait for, or output
    that cannot be flushed (which that exit reports). Returns if so."""
    import atexit

    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()
           if thread is not threading.current_thread()):
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):   # a closed pipe, say: the ordinary exit says so (and exits 120)
        return
    atexit._run_exitfuncs()   # logging's shutdown among them; they are not run again
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):
        return
    os._exit(code)


def _attribute(target: str) -> click.Command:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


class CommandRegistry(click.Group):
    """A click group whose commands are found by name (see the module
    docstring) and imported on first use."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """click's ``main``; when run as the command line (``args`` from
        ``sys.argv``), a command that called
        :func:`mesoslike.cli.options.exit_when_done` ends the process at once."""
        if args is not None or not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        except SystemExit as exc:
            options = sys.modules.get("mesoslike.cli.options")   # imported by every command that may ask
            if options is not None and options.exit_requested() and (exc.code is None or isinstance(exc.code, int)):
                _end_process(exc.code or 0)
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        from mesoslike import plugins   # here: the entry points' lookup costs a built-in command nothing

        return sorted({*BUILT_IN, *plugins.names(plugins.COMMANDS), *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self.commands.get(cmd_name)
        if command is not None:
            return command
        if cmd_name in BUILT_IN:
            command = _attribute(BUILT_IN[cmd_name])
            for target in SUBCOMMANDS.get(cmd_name, ()):
                assert isinstance(command, click.Group)
                command.add_command(_attribute(target))
            self.add_command(command, cmd_name)
            return command
        from mesoslike import plugins

        if cmd_name in plugins.names(plugins.COMMANDS):
            try:
                command = plugins.load(plugins.COMMANDS, cmd_name)
            except plugins.PluginError as exc:
                raise click.ClickException(str(exc)) from None
            if not isinstance(command, click.Command):
                raise click.ClickException(f"the command plugin {cmd_name!r} is not a click command")
        else:
            return None
        self.add_command(command, cmd_name)
        return command


@click.group(cls=CommandRegistry, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, "--version", prog_name="mesoslike")
def main() -> None:
    """mesoslike: a Mesos-style two-level cluster manager with Fuxi scheduling semantics."""
    _stacks_on_sigquit()


def _stacks_on_sigquit() -> None:
    """``kill -QUIT PID`` writes the stack of every thread of a mesoslike
    process to its stderr (its log) and the process goes on, as a JVM's
    thread dump: the way to see where a process that stopped answering
    stands, even one whose threads all wait (faulthandler writes from the
    signal handler, without the interpreter's lock)."""
    try:
        faulthandler.register(signal.SIGQUIT, all_threads=True, chain=False)
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):   # no stderr file to write to
        pass
