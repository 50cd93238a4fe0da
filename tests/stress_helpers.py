"""The stress test's parts (docs/reliability.rst, issue 12 §1 and §4).

* :func:`run_simulated_agents` — ``python tests/stress_helpers.py agents
  --master ADDR --count N``: N agents in one process, each a real
  :class:`~mesoslike.agent.core.AgentCore` on its own connection, whose tasks
  start and end at once (exit 0) — the agent protocol at full speed, with
  the real agent's reliable status updates and retries. On SIGTERM it prints
  one JSON line of what the agents saw (RUN_TASKs, duplicates) and exits.
* :class:`CountingScheduler` — launches a planned number of tasks, as many
  per offer as fit, and counts what reaches it: each task's terminal states,
  updates delivered twice (the same uuid), callbacks.
* :func:`metrics` — a master's ``/metrics``; :func:`rss_kib` — a process's
  resident memory, for the fuzz test.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections import Counter, deque
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run as a script from a checkout

from mesoslike import Filters, Resources, Scheduler, TaskInfo  # noqa: E402
from mesoslike.wire import TERMINAL_STATES  # noqa: E402


# ----------------------------------------------------------- simulated agents
def run_simulated_agents(master: str, count: int, resources: str, prefix: str) -> dict:
    """Serve ``count`` agents until SIGTERM; what they saw."""
    from mesoslike.agent.core import AgentCore, KillTask, LaunchTask, SendToMaster
    from mesoslike.clock import SystemClock
    from mesoslike.master.runtime import LongLivedObjects
    from mesoslike.transport import Client, Poller, Waker
    from mesoslike.wire import AgentInfo
    from mesoslike.wire import messages as m
    from mesoslike.wire.batching import batch_frames, batched_messages

    LongLivedObjects().start()   # the master's young-generation threshold: the collector was 20 % of this process
    clock = SystemClock()
    waker = Waker()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: (stopping.set(), waker.wake()))
    cores = [AgentCore(clock, AgentInfo(hostname=f"{prefix}-{i}", resources=Resources.parse(resources)),
                       register_backoff=1.0, register_backoff_max=2.0) for i in range(count)]
    from mesoslike.credentials import client_keys

    keys, server_key = client_keys(None, None)   # MESOSLIKE_KEY / MESOSLIKE_MASTER_KEY of a secured cluster
    clients = [Client(master, keys=keys, server_key=server_key) for _ in cores]
    poller = Poller([waker, *clients])
    by_client = {id(client): (core, client) for core, client in zip(cores, clients)}
    seen: set[tuple[str, str]] = set()   # the launches received, by (framework, task)
    stats = {"run_task": 0, "run_task_duplicates": 0, "unsent": 0}

    outgoing: dict[int, list] = {id(client): [] for client in clients}

    def send_outgoing(core: AgentCore, client: Client) -> None:
        """What the agent has for its master this turn, batched as the agent runtime does."""
        messages, outgoing[id(client)] = outgoing[id(client)], []
        for message in batched_messages(messages, core.master_accepts_batches):
            for frame in batch_frames(message, client.codec.encode):
                if not client.send_frame(frame):
                    stats["unsent"] += 1

    def carry_out(core: AgentCore, client: Client, commands: list) -> None:
        queue = deque(commands)
        sends = outgoing[id(client)]   # (each turn's list: send_outgoing takes it after the carrying out)
        while queue:
            command = queue.popleft()
            if type(command) is SendToMaster or isinstance(command, SendToMaster):   # (three a task: first)
                sends.append(command.message)
            elif isinstance(command, LaunchTask):   # starts and ends at once
                fid, tid = command.framework.id, command.task.task_id
                queue.extend(core.on_task_started(fid, tid, 1))
                queue.extend(core.on_task_exited(fid, tid, 0))
            elif isinstance(command, KillTask):
                queue.extend(core.on_task_exited(command.framework_id, command.task_id, None, signal.SIGTERM))

    # when each core's tick has work next (AgentCore.next_wakeup, asked again after each event): only
    # those due are ticked, as ten agents of their own would be — not all ten for any agent's frame
    wakeups = [0.0] * len(cores)
    index = {id(client): i for i, client in enumerate(clients)}
    while not stopping.is_set():
        now = clock.now()
        for i, (core, client) in enumerate(zip(cores, clients)):
            if wakeups[i] <= now:
                carry_out(core, client, core.tick())
                send_outgoing(core, client)
                wakeups[i] = core.next_wakeup()
        for item in poller.poll(max(0.0, min(min(wakeups) - clock.now(), 0.5))):
            if item is waker:
                continue
            core, client = by_client[id(item)]
            for _, message in client.receive():
                if isinstance(message, Exception):
                    continue
                launches = message.tasks if isinstance(message, m.RunTasks) else \
                    [message.task] if isinstance(message, m.RunTask) else ()
                for task in launches:   # each launch counted, a batch's too
                    key = (message.framework.id, task.task_id)  # type: ignore[attr-defined]
                    if key in seen:
                        stats["run_task_duplicates"] += 1
                    else:
                        seen.add(key)
                stats["run_task"] += len(launches)
                carry_out(core, client, core.on_message(message))
            send_outgoing(core, client)
            wakeups[index[id(client)]] = core.next_wakeup()
    stats["tasks"] = len(seen)
    for client in clients:
        client.close()
    return stats


# ------------------------------------------------------------------ framework
class CountingScheduler(Scheduler):
    """Launches ``tasks`` tasks of ``task_resources`` (as many per offer as
    fit, at most ``per_accept`` in one ACCEPT; only on the agent named
    ``hostname`` if given) and counts what comes back."""

    def __init__(self, tasks: int, task_resources: str, per_accept: int | None = None, command: str = "true",
                 prefix: str = "t", hostname: str | None = None) -> None:
        self.hostname = hostname
        self.planned = tasks
        self.task_resources = Resources.parse(task_resources)
        self.per_accept = per_accept or tasks
        self.command = command
        self.prefix = prefix
        self.launched = 0
        self.lock = threading.Condition()
        self.terminal: dict[str, list[str]] = {}     # task id -> its terminal states, in order
        self.uuids: Counter[str] = Counter()          # uuid -> times the callback saw it
        self.updates = 0
        self.errors: list[str] = []
        self.framework_id = ""
        self.agent_of: dict[str, str] = {}            # task id -> its agent
        self.reregistrations = 0
        self.samples: dict[str, str] = {}             # terminal state -> why, for the first task that ended so

    def registered(self, driver, framework_id, master_info):
        self.framework_id = framework_id

    def reregistered(self, driver, master_info):
        # as a Mesos framework does: what was said while we were away (a
        # launch on the old connection, a TASK_LOST) is asked for again
        with self.lock:
            self.reregistrations += 1
            open_tasks = [task_id for task_id in self.agent_of if task_id not in self.terminal]
        driver.reconcile_tasks(open_tasks)

    def resource_offers(self, driver, offers):
        for offer in offers:
            tasks = []
            left = offer.resources
            while self.launched < self.planned and len(tasks) < self.per_accept and \
                    left.contains(self.task_resources) and self.hostname in (None, offer.hostname):
                tasks.append(TaskInfo(f"{self.prefix}{self.launched:06d}", offer.agent_id, self.command,
                                      self.task_resources))
                with self.lock:
                    self.agent_of[tasks[-1].task_id] = offer.agent_id
                self.launched += 1
                left = left - self.task_resources
            if tasks:
                driver.launch_tasks([offer.id], tasks, Filters(refuse_seconds=0.0))
            else:
                driver.decline_offer(offer.id, Filters(refuse_seconds=1.0))

    def status_update(self, driver, status):
        with self.lock:
            self.updates += 1
            if status.uuid:
                self.uuids[status.uuid] += 1
            if status.state in TERMINAL_STATES:
                self.terminal.setdefault(status.task_id, []).append(status.state)
                self.samples.setdefault(status.state, f"{status.reason}: {status.message}")
            self.lock.notify_all()

    def error(self, driver, message):
        with self.lock:
            self.errors.append(message)

    # what a test asserts
    def finished(self) -> bool:
        with self.lock:
            return len(self.terminal) >= self.planned

    def figures(self) -> dict:
        with self.lock:
            states = Counter(states[0] for states in self.terminal.values())
            return {
                "tasks": self.planned, "launched": self.launched, "updates": self.updates,
                "with_terminal_state": len(self.terminal),
                "lost": self.planned - len(self.terminal),
                "twice_terminal": sum(1 for states in self.terminal.values() if len(states) > 1),
                "duplicate_uuids": sum(1 for n in self.uuids.values() if n > 1),
                "terminal_states": dict(states), "why": dict(self.samples), "reregistrations": self.reregistrations,
                "errors": list(self.errors[:5]),
            }


# ------------------------------------------------------------ observations
def metrics(http: str) -> dict[str, float]:
    """A master's ``/metrics``: sample (with its labels) -> value."""
    from e2e_helpers import http_get

    values = {}
    for line in http_get(http + "/metrics", timeout=10.0)[2].splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise ValueError(f"no VmRSS for {pid}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    agents = sub.add_parser("agents", help="serve simulated agents until SIGTERM")
    agents.add_argument("--master", required=True)
    agents.add_argument("--count", type=int, default=10)
    agents.add_argument("--resources", default="cpus:100;mem:100000")
    agents.add_argument("--prefix", default="sim")
    args = parser.parse_args(argv)
    stats = run_simulated_agents(args.master, args.count, args.resources, args.prefix)
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
