"""The command line's quick exit (``mesoslike.cli.options.exit_when_done``): a
command that has finished its work ends the process without the
interpreter's teardown — its exit status, its output and the ``atexit``
handlers kept — only when it runs as the command line, never in-process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from mesoslike.cli import CommandRegistry
from mesoslike.cli.options import exit_when_done

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parent.parent

#: a command line whose command asks for the quick exit; an object freed only by the
#: interpreter's teardown says when it is (its module's globals are cleared then)
PROGRAM = textwrap.dedent("""
    import atexit, sys, threading
    import click
    from mesoslike.cli import CommandRegistry
    from mesoslike.cli.options import exit_when_done

    class Freed:
        def __del__(self):
            sys.stderr.write("torn down\\n")

    kept = Freed()
    atexit.register(lambda: sys.stderr.write("atexit ran\\n"))

    @click.group(cls=CommandRegistry)
    def main():
        pass

    @main.command()
    @click.option("--code", type=int, default=0)
    @click.option("--thread", is_flag=True)
    def work(code, thread):
        if thread:   # a thread the interpreter waits for: the ordinary exit
            threading.Thread(target=lambda: threading.Event().wait(0.5)).start()
        sys.stdout.write("written, not yet flushed")
        exit_when_done()
        raise SystemExit(code)

    main()
""")


def run_program(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=30)


@pytest.mark.parametrize("code", [0, 3])
def test_a_command_that_is_done_ends_the_process_without_the_teardown(code):
    done = run_program("work", "--code", str(code))
    assert done.returncode == code
    assert done.stdout == "written, not yet flushed"
    assert "atexit ran" in done.stderr
    assert "torn down" not in done.stderr


def test_a_thread_still_running_gets_the_ordinary_exit():
    done = run_program("work", "--thread")
    assert done.returncode == 0 and done.stdout == "written, not yet flushed"
    assert "atexit ran" in done.stderr and "torn down" in done.stderr


def test_in_process_the_command_returns_as_always(monkeypatch):
    import mesoslike.cli.options

    monkeypatch.setattr(mesoslike.cli.options, "_exit_when_done", False)   # put back after the test

    @click.group(cls=CommandRegistry)
    def group():
        pass

    @group.command()
    def work():
        click.echo("done")
        exit_when_done()
        raise SystemExit(5)

    result = CliRunner().invoke(group, ["work"])   # this process goes on: the runner sees the status
    assert result.exit_code == 5 and result.output == "done\n"
