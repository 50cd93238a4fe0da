"""Issue 13 §8-§9: secure by default. A master without credentials binds
loopback only (another address needs --insecure, which warns at every
start); ``mesoslike local`` runs authenticated with keys it makes under its
work dir and hands its COMMAND what a client needs; secret files must be
private; task environments stay out of /state and the logs."""

from __future__ import annotations

import logging
import json
import os
import stat
import subprocess
import sys

import pytest

from mesoslike.errors import ConfigError
from mesoslike.master.runtime import MasterRuntime
from mesoslike.master.settings import MasterSettings
from tests.e2e_helpers import REPO, child_env

pytestmark = pytest.mark.timeout(90)


def mesoslike(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mesoslike", *args], cwd=REPO, env=env or child_env(),
                          capture_output=True, text=True, timeout=timeout)


def test_a_master_on_another_address_without_credentials_refuses_to_start():
    done = mesoslike("master", "--ip", "0.0.0.0", "--port", "0", "--http-port", "0")
    assert done.returncode == 1
    assert "refusing to bind 0.0.0.0 without --credentials" in done.stderr and "--insecure" in done.stderr


def test_insecure_lets_it_start_and_warns(caplog):
    with caplog.at_level(logging.WARNING, "mesoslike.master"):
        master = MasterRuntime(MasterSettings(address="tcp://0.0.0.0:0", http_port=None, insecure=True))
    try:
        assert "INSECURE" in caplog.text
    finally:
        master.stop()
    with pytest.raises(ConfigError, match="needs both --key"):
        MasterRuntime(MasterSettings(address="tcp://127.0.0.1:0", http_port=None, credentials=None, keys=object()))  # type: ignore[arg-type]


def test_local_runs_authenticated_and_hands_its_command_the_keys(tmp_path):
    work = tmp_path / "work"
    done = mesoslike("local", "--agents", "1", "--port", "0", "--http-port", "0", "--work-dir", str(work), "--",
                     sys.executable, "-c", "import os; print('ENV', os.environ['MESOSLIKE_KEY'], "
                     "os.environ['MESOSLIKE_MASTER_KEY'], os.environ['MESOSLIKE_TOKEN'])")
    assert done.returncode == 0, done.stderr
    keys = work / "keys"
    assert f"keys and credentials in {keys}" in done.stdout
    line = next(x for x in done.stdout.splitlines() if x.startswith("ENV "))
    _, key, master_key, token = line.split()
    assert key == str(keys / "client.key_secret") and master_key == str(keys / "master.key")
    assert token == (keys / "operator.token").read_text().strip()
    for secret in ("client.key_secret", "master.key_secret", "node-0.key_secret", "credentials.toml",
                   "operator.token", "client.token", "mesos.credential"):
        assert stat.S_IMODE(os.stat(keys / secret).st_mode) == 0o600, secret
    # the client principal's HTTP secret, for Mesos's v1 APIs (pymesos), in Mesos's credential format
    assert json.loads((keys / "mesos.credential").read_text()) == \
        {"principal": "client", "secret": (keys / "client.token").read_text().strip()}
    assert f"principal 'client', its secret in {keys}/client.token" in done.stdout
    insecure = mesoslike("local", "--insecure", "--agents", "1", "--port", "0", "--http-port", "0", "--",
                         sys.executable, "-c", "import os; print('HAS_KEY', 'MESOSLIKE_KEY' in os.environ)")
    assert insecure.returncode == 0 and "HAS_KEY False" in insecure.stdout, insecure.stdout + insecure.stderr


def test_a_secret_key_others_may_read_stops_the_process_naming_it(tmp_path):
    done = mesoslike("keys", "new", "m", "--dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    os.chmod(tmp_path / "m.key_secret", 0o640)
    done = mesoslike("agent", "--master", "tcp://127.0.0.1:1", "--key", str(tmp_path / "m.key_secret"),
                     "--master-key", str(tmp_path / "m.key"), "--work-dir", str(tmp_path / "agent"))
    assert done.returncode == 1 and f"{tmp_path / 'm.key_secret'} has mode 0640: it must be 0600" in done.stderr
