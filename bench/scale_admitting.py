#!/usr/bin/env python3
"""Figures of a ``bench/scale_master.py`` run taken from outside while it
still admits agents: for a size the machine cannot finish in the time at
hand (the run's own JSON has only what it finished).

Reads the newest ``/tmp/mesoslike-scale-*`` run: the master's RSS and CPU
seconds (``/proc``), the registry's znodes in ZooKeeper (their count and
the largest: ZooKeeper refuses one over ~1 MB), an estimate of the agents
stored (~103 bytes each), and the master's loop turns so far (SIGUSR2 makes
``bench/master_turns.py`` write them). One JSON document to stdout.

    python bench/scale_admitting.py > bench/results/scale_master_100k_admitting.json
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from failover import registry_shards  # noqa: E402
from scale_master import quantiles  # noqa: E402

#: a stored agent record, bytes (10,000 agents: 1,034,888 bytes in their shards)
AGENT_RECORD_BYTES = 103


def main() -> int:
    from kazoo.client import KazooClient

    run = sorted(glob.glob("/tmp/mesoslike-scale-*"), key=os.path.getmtime)[-1]
    pid = int(subprocess.check_output(["pgrep", "-f", f"master_turns.py {run}"]).split()[0])
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    started = time.monotonic() - (time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    os.kill(pid, signal.SIGUSR2)   # the turns so far
    time.sleep(3)
    (turns_file,) = glob.glob(f"{run}/*.turns")
    turns = json.loads(Path(turns_file).read_text())
    (log,) = glob.glob(f"{run}/*-master.log")
    text = Path(log).read_text()
    hosts = text.split("contending in zk://", 1)[1].split("/", 1)[0]
    client = KazooClient(hosts=hosts)
    client.start(10)
    try:
        path = "/mesoslike-scale/" + sorted(client.get_children("/mesoslike-scale"))[-1]
        shards = registry_shards(client, path)
    finally:
        client.stop()
    sizes = shards.pop("sizes")
    print(json.dumps({
        "what": "a bench/scale_master.py run harvested from outside while admitting (docs/performance.rst)",
        "run": path, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "loadavg": os.getloadavg(),
        "master_alive_s": round(time.monotonic() - started, 1),
        "master_rss_bytes": int(status["VmRSS"].split()[0]) * 1024,
        "master_hwm_bytes": int(status["VmHWM"].split()[0]) * 1024, "master_cpu_s": cpu,
        "registry": shards | {"bytes": sum(sizes.values())},
        "agents_stored_estimate": sum(v for n, v in sizes.items() if n.startswith("agents.")) // AGENT_RECORD_BYTES,
        "loop_turns_s": quantiles(turns["turns"]) | {"window_s": round(turns["at"] - turns["since"], 1),
                                                      "busy_s": round(sum(turns["turns"]), 1)},
        "session_expiries": text.count("the session had expired"),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
