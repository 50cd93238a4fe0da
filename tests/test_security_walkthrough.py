"""docs/security.rst's "Setting up a secured cluster, step by step" works as
written: its ``bash`` blocks, taken from the page (so the page and this test
cannot drift apart), run in order in an empty directory — keys, credentials
with ``mesoslike keys token``, a master, an agent, ``mesoslike state``, a
``mesoslike run --user nobody --env ...`` the ACL allows, the operator's
quota commands — and every step succeeds. Only the master's ports are
changed (to free ones), and the page's ``mesoslike`` is this checkout's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from e2e_helpers import REPO, child_env, free_port, kill_task_processes

pytestmark = pytest.mark.timeout(240)

DOC = REPO / "docs" / "security.rst"
SECTION = "Setting up a secured cluster, step by step"


def walkthrough() -> list[str]:
    """The ``.. code-block:: bash`` blocks of the section, dedented, in order."""
    text = DOC.read_text()
    body = text[text.index(SECTION):]
    body = body[:body.index("\nOn a real cluster\n")]
    blocks = []
    lines = body.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == ".. code-block:: bash":
            indent = len(line) - len(line.lstrip())
            block = []
            for following in lines[i + 1:]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                block.append(following)
            blocks.append(textwrap.dedent("\n".join(block)).strip("\n"))
    return blocks


def test_the_walkthrough_has_every_step():
    script = "\n".join(walkthrough())
    for step in ("mesoslike keys new master", "mesoslike keys token ops", "mesoslike master ", "mesoslike agent ",
                 "mesoslike state ", "mesoslike run ", "--user nobody", "--env ", "mesoslike quota set", "kill %"):
        assert step in script, step


def test_the_security_walkthrough_runs_as_written(tmp_path):
    port, http_port = free_port(), free_port()
    script = "\n".join(walkthrough()).replace("127.0.0.1:5050", f"127.0.0.1:{port}") \
        .replace("127.0.0.1:5051", f"127.0.0.1:{http_port}").replace("--port 5050", f"--port {port}") \
        .replace("--http-port 5051", f"--http-port {http_port}")
    # every one of the page's ports replaced (a number, not a substring: a free port may be 45051)
    assert not re.search(r"(?<![0-9])505[01](?![0-9])", script)
    bin_dir = tmp_path / "bin"   # `mesoslike` as the page says it, running this checkout
    bin_dir.mkdir()
    (bin_dir / "mesoslike").write_text(f"#!/bin/sh\nexec {sys.executable} -m mesoslike \"$@\"\n")
    (bin_dir / "mesoslike").chmod(0o755)
    env = dict(child_env(), PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    work = tmp_path / "cluster"
    work.mkdir()
    os.chmod(tmp_path, 0o755)   # the user nobody reaches its sandbox below here
    # -e: a step that fails fails the test; the trap stops what a failed step left running
    traced = ("set -e -x\ntrap 'status=$?; kill $(jobs -p) 2>/dev/null || true; wait; exit $status' EXIT\n"
              + script + "\nwait\n")
    try:
        done = subprocess.run(["bash", "-c", traced], cwd=work, env=env, capture_output=True, text=True, timeout=200)
    finally:
        kill_task_processes(work)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-6000:]
    out = done.stdout
    assert "done: 1/1 finished, 0 failed" in out, out + done.stderr[-3000:]
    assert "TASK_ERROR" not in out and "not authorized" not in out + done.stderr
    assert "quota of role *: guarantee none, limit cpus:1" in out
    assert re.search(r"^\*\s+-\s+cpus:1\s", out, re.M), out
    assert "agent1" in out   # mesoslike state listed the agent
    # the task ran as the user the ACL grants, with the variable given
    (stdout,) = Path(work, "agent1", "sandboxes").glob("*/run-*-0/stdout")
    if os.geteuid() == 0:   # a root agent switches to the user (else tasks run as the agent's user)
        assert stdout.read_text() == "hello\nnobody\n"
    else:
        assert stdout.read_text().startswith("hello\n")
    assert "ERROR" not in done.stderr, done.stderr[-3000:]
