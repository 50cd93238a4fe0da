"""What ``mesoslike fuxi submit`` imports: the job protocol and the
transport, not the Fuxi service and its scheduler (frameworks/
mesoslike_frameworks/fuxi/client.py). A submission waits for its client to
start: the service's module cost it 0.45 s of CPU more."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

_SUBMIT = """
import runpy, sys
sys.argv = ["mesoslike", "fuxi", "submit", "--fuxi", sys.argv[1], "--timeout", "0.3", sys.argv[2]]
try:
    runpy.run_module("mesoslike", run_name="__main__")
except SystemExit:
    pass
print(sorted(m for m in ("mesoslike_frameworks.fuxi.client", "mesoslike_frameworks.fuxi.service",
                         "mesoslike_frameworks.fuxi.core", "mesoslike_frameworks.fuxi.jobs", "ctypes",
                         "mesoslike.driver")
             if m in sys.modules), file=sys.stderr)
"""


def test_a_submission_imports_the_job_client_not_the_service(tmp_path):
    """... nor ``ctypes``: a client is short-lived and its frames small, so its endpoint keeps glibc's
    allocator threshold (``mesoslike.transport.small_frames_only``) instead of importing ctypes to set it."""
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "j"\n\n[[job.units]]\nname = "work"\nslots = 1\ncpus = 0.1\nmem = 16\n'
                   'instances = 1\ncommand = "true"\n')
    with socket.socket() as sock:   # a port nobody listens on: the submission gets no answer
        sock.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    done = subprocess.run([sys.executable, "-c", _SUBMIT, address, str(job)], capture_output=True, text=True,
                          timeout=30)
    assert "no answer from a Fuxi service" in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "['mesoslike_frameworks.fuxi.client']", done.stderr


_CREDENTIALS = _SUBMIT.replace('"mesoslike.driver")', '"mesoslike.driver", "mesoslike.credentials")')


@pytest.mark.parametrize("key_env", [None, "MESOSLIKE_FUXI_KEY"])
def test_a_submission_without_keys_does_not_import_the_credentials(tmp_path, key_env):
    """Without --key, --fuxi-key or a MESOSLIKE_*KEY* variable the client is
    anonymous in the clear, and the credentials module (acl, secrets, hmac)
    is not imported before the submission goes out; with a key variable it
    is, and its keys are used (a public key file that is not there: exit 1
    saying so)."""
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "j"\n\n[[job.units]]\nname = "work"\nslots = 1\ncpus = 0.1\nmem = 16\n'
                   'instances = 1\ncommand = "true"\n')
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    env = {name: value for name, value in os.environ.items() if not (name.startswith("MESOSLIKE_") and "KEY" in name)}
    if key_env:
        env[key_env] = str(tmp_path / "no-such.key")
    done = subprocess.run([sys.executable, "-c", _CREDENTIALS, address, str(job)], capture_output=True, text=True,
                          timeout=30, env=env)
    imported = done.stderr.strip().splitlines()[-1]
    if key_env:
        assert "no-such.key" in done.stderr, done.stderr
        assert imported == "['mesoslike.credentials', 'mesoslike_frameworks.fuxi.client']", done.stderr
    else:
        assert "no answer from a Fuxi service" in done.stderr, done.stderr
        assert imported == "['mesoslike_frameworks.fuxi.client']", done.stderr


def test_a_wait_polls_sooner_near_the_jobs_end_and_never_slower_than_its_interval():
    """``submit --wait``/``status --wait``: the next poll comes after
    ``--interval``, or sooner — down to a fifth of it — when the rate since
    the last poll says the last instance ends sooner, or when every instance
    is done and only the job's end is to come (it was seen up to a whole
    interval late)."""
    from mesoslike_frameworks.fuxi.cli import next_poll

    assert next_poll(0.5, None, 10.0, 0, 100) == 0.5                    # no rate yet
    assert next_poll(0.5, (10.0, 0), 10.5, 10, 1000) == 0.5             # far from the end
    assert next_poll(0.5, (10.0, 0), 10.5, 800, 1000) == 0.125          # 1,600/s: 200 left in 0.125 s
    assert next_poll(0.5, (10.0, 0), 10.5, 990, 1000) == 0.1            # never below a fifth
    assert next_poll(0.5, (10.0, 5), 10.5, 1000, 1000) == 0.1           # all done: the end is near
    assert next_poll(0.5, (10.0, 5), 10.5, 5, 1000) == 0.5              # nothing done since: no rate
