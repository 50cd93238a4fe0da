"""The service scheduler against `mesoslike run`: the time from ``POST
/v2/apps`` of N instances to all N running, next to the same N launched by
``mesoslike run`` on the same cluster, in interleaved rounds of one run
(machines are noisy: the ratio is the figure).

    python bench/services.py [--instances 1000] [--rounds 2] [--out bench/results/services.json]

The cluster: a master and 4 agents as processes (bench/throughput.py's
Cluster); each instance is ``sleep 600`` with cpus 0.01 and mem 8, so both
schedulers are held only by placement and the agents' starting of tasks.
The service keeps its state in a work dir (every launch stored before it is
sent, as in production). "All running": the service's ``tasksRunning``
(what a user of the API sees), and for ``mesoslike run`` the master's
``/state``. Each round ends its tasks (DELETE the app / SIGINT the run) and
waits for the master to have none before the next.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import git_state, machine_info  # noqa: E402
from throughput import Cluster, Processes, free_port, get_json, log, spread, wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
AGENT_RESOURCES = "cpus:16;mem:16384;disk:1000;ports:[31000-32999]"
COMMAND = "sleep 600"


def _request(url: str, method: str, body: object | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        raw = answer.read()
    return json.loads(raw) if raw.strip() else {}


def _live_tasks(cluster: Cluster, name: str) -> list[dict]:
    state = get_json(cluster.http + "/state", 30)
    return [t for f in state["frameworks"] if f["name"] == name for t in f["tasks"]
            if t["state"] in ("TASK_STAGING", "TASK_STARTING", "TASK_RUNNING", "TASK_KILLING")]


def round_services(cluster: Cluster, url: str, instances: int, number: int) -> float:
    app_id = f"/bench/round-{number}"
    started = time.perf_counter()
    _request(url + "/v2/apps", "POST", {"id": app_id, "cmd": COMMAND, "instances": instances, "cpus": 0.01,
                                        "mem": 8, "portDefinitions": []})
    wait_for(lambda: _request(url + "/v2/apps" + app_id, "GET")["app"]["tasksRunning"] == instances, 1200,
             f"{instances} instances running (services)")
    elapsed = time.perf_counter() - started
    _request(url + "/v2/apps" + app_id, "DELETE")
    wait_for(lambda: not _live_tasks(cluster, "services"), 600, "the app's tasks to end")
    return elapsed


def round_run(procs: Processes, cluster: Cluster, instances: int, number: int) -> float:
    name = f"run-{number}"
    started = time.perf_counter()
    child = procs.mesoslike(name, "run", "--master", cluster.address, "--name", name, "--instances",
                            str(instances), "--cpus", "0.01", "--mem", "8", "--", *COMMAND.split())
    wait_for(lambda: sum(1 for t in _live_tasks(cluster, name) if t["state"] == "TASK_RUNNING") == instances, 1200,
             f"{instances} instances running (mesoslike run)")
    elapsed = time.perf_counter() - started
    child.send_signal(signal.SIGTERM)     # `mesoslike run` kills its instances (SIGINT may be ignored in a background job)
    child.wait(300)
    procs.procs.pop(name, None)
    wait_for(lambda: not _live_tasks(cluster, name), 600, "the run's tasks to end")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "services.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-services-"))
    load_start, started_at = os.getloadavg(), time.strftime("%Y-%m-%dT%H:%M:%S%z")
    procs = Processes(work)
    try:
        cluster = Cluster(procs, 4, AGENT_RESOURCES)
        port = free_port()
        procs.mesoslike("services", "services", "serve", "--master", cluster.address, "--http-port", str(port),
                        "--work-dir", str(work / "services"))
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: _request(url + "/v2/info", "GET").get("elected"), 60, "the service")
        services, runs, loads = [], [], []
        for number in range(args.rounds):
            services.append(round_services(cluster, url, args.instances, number))
            log(f"round {number}: services {services[-1]:.1f}s")
            runs.append(round_run(procs, cluster, args.instances, number))
            log(f"round {number}: mesoslike run {runs[-1]:.1f}s")
            loads.append(os.getloadavg()[0])
        commit, dirty = git_state(["bench/services.py", "frameworks/mesoslike_frameworks/services/core.py"])
        result = {
            "benchmark": "services", "instances": args.instances, "agents": 4, "agent_resources": AGENT_RESOURCES,
            "command": COMMAND, "rounds": args.rounds, "started_at": started_at,
            "bench_command": "python bench/services.py " + " ".join(sys.argv[1:]),
            "services_seconds_to_all_running": spread(services),
            "run_seconds_to_all_running": spread(runs),
            "services_over_run": round(statistics.median(services) / statistics.median(runs), 2),
            "instances_per_s": {"services": round(args.instances / min(services), 1),
                                "run": round(args.instances / min(runs), 1)},
            "machine": machine_info(), "commit": commit, "dirty": dirty,
            # the machine is shared: its load when the run began, after each round, when it ended
            "loadavg_start_end": [load_start, os.getloadavg()], "loadavg_1m_after_each_round": loads,
        }
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        procs.close()


if __name__ == "__main__":
    main()
