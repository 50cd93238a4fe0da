"""Rough edges a new user met (issue 17 §5), each as the user meets it: the
real command line in a subprocess (or click's CliRunner where no process
boundary matters), real clusters on 127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from e2e_helpers import REPO, child_env, free_port

pytestmark = pytest.mark.timeout(120)


def mesoslike(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None,
              cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python -m mesoslike ARGS`` as a user runs it, its output captured."""
    return subprocess.run([sys.executable, "-m", "mesoslike", *args], cwd=str(cwd), env=env or child_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)


# ------------------------------------------------------------------ local
def test_local_with_a_missing_command_says_so_in_one_line_and_stops(tmp_path):
    work = tmp_path / "work"
    done = mesoslike("local", "--port", str(free_port()), "--http-port", str(free_port()), "--work-dir", str(work),
                     "--", "nosuchcmd-of-the-test")
    assert done.returncode == 127, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: cannot run 'nosuchcmd-of-the-test': No such file or directory; stopping the cluster"]


def test_local_with_a_command_that_is_not_executable_exits_126(tmp_path):
    script = tmp_path / "not-executable.sh"
    script.write_text("echo hi\n")
    done = mesoslike("local", "--port", str(free_port()), "--http-port", str(free_port()), "--work-dir",
                     str(tmp_path / "work"), "--", str(script))
    assert done.returncode == 126, done.stderr
    assert "Traceback" not in done.stderr
    assert f"error: cannot run '{script}': Permission denied" in done.stderr
