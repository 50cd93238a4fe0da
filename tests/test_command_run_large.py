"""``mesoslike run`` with 2,000 instances on a ``mesoslike local`` cluster
completes, each instance once (issue 14). A functional test: no timing is
asserted (bench/throughput.py measures the rate)."""

import subprocess
import sys

import pytest

from e2e_helpers import REPO, child_env, free_port

pytestmark = pytest.mark.timeout(300)


def test_a_2000_instance_run_completes_and_reports_every_instance_finished():
    args = [sys.executable, "-m", "mesoslike", "local", "--agents", "4", "--resources", "cpus:16;mem:16384",
            "--port", str(free_port()), "--http-port", str(free_port()), "--allocation-interval", "0.2", "--",
            sys.executable, "-m", "mesoslike", "run", "--instances", "2000", "--cpus", "0.01", "--mem", "1", "--",
            "true"]
    done = subprocess.run(args, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "done: 2000/2000 finished, 0 failed, 0 running, 0 waiting" in done.stdout
