#!/usr/bin/env python3
"""The master core's share of a control-plane task, in process: no sockets,
no codec, no other process — CPU a task of ``MasterCore.on_message`` for
what ``bench/throughput.py --only control`` sends it (docs/performance.rst,
"Control plane, batches handled as batches").

A framework and ``--agents`` agents subscribe and register; each round the
framework accepts every offer with as many tasks as fit (``cpus:0.01;mem:1``
as the benchmark's), each agent answers its tasks with three status updates
(STARTING, RUNNING, FINISHED; each the next only once the one before is
acknowledged, as the agent's update streams have it) in STATUS_UPDATES
batches of up to ``--batch``, and the framework acknowledges what it is
forwarded in ACKNOWLEDGEMENTS batches. ``time.thread_time`` around the
core's calls only (the harness's own work not counted); best of
``--repeat`` fresh cores.

With ``--parts master,agent,driver`` (the default: all three) it measures
the other two processes' cores the same way: an ``AgentCore`` (as
``tests/stress_helpers.py agents`` runs it: each launch started and ended
at once, its updates acknowledged in STATUS_UPDATE_ACKS batches of
``--batch``; ``agent.run`` is the RUN_TASKS with each task's TASK_STARTING,
``agent.started_exited`` its RUNNING and FINISHED, ``agent.acks`` the
acknowledgements and the next update's send) and a ``SchedulerDriver``'s
update path (UPDATES of ``--batch`` statuses through ``DriverCore.receive``,
the callbacks of a scheduler that does nothing, the acknowledgements
batched and encoded; no socket). The master's figures keep their keys
(``total`` is the master's); the others are ``agent.*``/``agent_total`` and
``driver.update``, CPU µs a task (three updates a task). ``--parts
framework`` (not in the default) is the round's framework process in
process: ``mesoslike run``'s ``CommandScheduler`` on a ``SchedulerDriver``,
its offers (``framework.offers``) and each task's three updates in UPDATES
frames of 250 (``framework.updates``), decoding and encoding included
(``framework_total``).

``--tree DIR`` (repeatable): measure the code of each source tree too, each part in
a child process of its own (its ``mesoslike`` first on the path), runs
interleaved: ``python bench/control_core.py --tree /tmp/main-tree``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(tasks: int, agents: int, batch: int, wire: bool = False) -> dict[str, float]:
    """The master core's CPU µs a task; with ``wire`` (``--parts
    master_wire``) each message it takes is decoded from its frame and what
    it says goes out as the runtime's turn sends it (batched, encoded, as
    ``MasterRuntime._deliver`` does), the collector's threshold as in the
    master's process."""
    from mesoslike.clock import FakeClock
    from mesoslike.master import MasterConfig, MasterCore
    from mesoslike.resources import Resources
    from mesoslike.wire import AgentInfo, Filters, FrameworkInfo, MasterInfo, TaskInfo, TaskState, TaskStatus
    from mesoslike.wire import messages as m

    clock = FakeClock()
    core = MasterCore(clock, MasterInfo("m", "tcp://127.0.0.1:1"),
                      MasterConfig(heartbeat_interval=1e6, ping_interval=1e6, allocation_interval=0.2))
    spent = {"accept": 0.0, "updates": 0.0, "acks": 0.0, "ticks": 0.0}

    def handle(kind: str, peer: bytes, message: object) -> list:
        began = time.thread_time()
        out = core.on_message(peer, message)
        spent[kind] += time.thread_time() - began
        return out

    call = handle
    if wire:
        from mesoslike.wire.batching import batch_frames, batched
        from mesoslike.wire.codec import CODEC
        from mesoslike.young_collections import pass_over_young_objects_less_often

        pass_over_young_objects_less_often()   # as the master's process does (LongLivedObjects().start())

        def frames_of(sends: list) -> list:   # the runtime's turn (MasterRuntime._deliver)
            pairs = batched([(send.peer, send.message) for send in sends], core.accepts_batches)
            return [(peer, frame) for peer, message in pairs for frame in batch_frames(message, CODEC.encode)]

        if hasattr(core, "batch_sends"):   # as the runtime has its core
            core.batch_sends()

        def through_wire(kind: str, peer: bytes, message: object) -> list:
            frame = CODEC.encode(message)
            began = time.thread_time()
            sends = core.on_message(peer, CODEC.decode(frame))
            frames = frames_of(sends)
            spent[kind] += time.thread_time() - began
            return [send for peer, frame in frames for send in _sends_of(peer, CODEC.decode(frame))]

        call = through_wire

    fw = b"fw"
    (subscribed,) = [s.message for s in core.on_message(fw, m.Subscribe(FrameworkInfo("bench", "*"),
                                                                                 accepts_batches=wire))
                     if isinstance(s.message, m.Subscribed)]
    fid = subscribed.framework_id
    peers = {}
    for i in range(agents):
        peer = f"ag{i}".encode()
        (registered,) = [s.message for s in core.on_message(peer, m.RegisterAgent(
            AgentInfo(f"sim-{i}", Resources.parse("cpus:1000;mem:1000000")), accepts_batches=wire))
            if isinstance(s.message, m.AgentRegistered)]
        peers[registered.agent_id] = peer
    need = Resources.parse("cpus:0.01;mem:1")
    launched = 0
    states = (TaskState.STARTING, TaskState.RUNNING, TaskState.FINISHED)
    stage: dict[str, int] = {}       # task -> how many of its updates were sent
    ready: dict[str, list[str]] = {}  # agent -> tasks whose next update is to be sent
    uuid = 0
    done = 0
    while done < tasks:
        clock.advance(0.2)
        began = time.thread_time()
        out = core.tick()
        spent["ticks"] += time.thread_time() - began
        for send in out:
            if send.peer == fw and isinstance(send.message, m.Offers):
                for offer in send.message.offers:
                    infos = []
                    left = offer.resources
                    while launched < tasks and left.contains(need):
                        infos.append(TaskInfo(f"t{launched:07d}", offer.agent_id, "true", need))
                        left = left - need
                        launched += 1
                    if infos:
                        for s in call("accept", fw, m.Accept(fid, [offer.id], infos, Filters(0.0))):
                            if isinstance(s.message, (m.RunTask, m.RunTasks)):
                                for info in (s.message.tasks if isinstance(s.message, m.RunTasks) else
                                             [s.message.task]):
                                    stage[info.task_id] = 0
                                    ready.setdefault(info.agent_id, []).append(info.task_id)
                    else:
                        call("accept", fw, m.Decline(fid, [offer.id], Filters(1.0)))
        while any(ready.values()):
            acks: list = []
            for agent_id, waiting in ready.items():
                while waiting:
                    chunk, waiting[:] = waiting[:batch], waiting[batch:]
                    updates = []
                    for task_id in chunk:
                        uuid += 1
                        updates.append(m.StatusUpdate(fid, TaskStatus(task_id, states[stage[task_id]], agent_id=agent_id,
                                                                      uuid=f"u{uuid}", framework_id=fid)))
                    for s in call("updates", peers[agent_id], m.StatusUpdates(updates)):
                        message = s.message
                        statuses = message.statuses if isinstance(message, m.Updates) else \
                            [message.status] if isinstance(message, m.Update) else []
                        for status in statuses:
                            acks.append(m.Acknowledge(fid, status.agent_id, status.task_id, status.uuid))
            for i in range(0, len(acks), batch):
                for s in call("acks", fw, m.Acknowledgements(acks[i:i + batch])):
                    if isinstance(s.message, m.StatusUpdateAck):
                        items = [s.message]
                    elif isinstance(s.message, m.StatusUpdateAcks):
                        items = list(s.message.acks)
                    else:
                        continue
                    for ack in items:
                        stage[ack.task_id] += 1
                        if stage[ack.task_id] < 3:
                            ready[ack.agent_id].append(ack.task_id)
                        else:
                            done += 1
    return {kind: 1e6 * seconds / tasks for kind, seconds in spent.items()}


def _sends_of(peer: bytes, message: object) -> list:
    """What a frame to ``peer`` carries, as the core's sends (its batches unbatched)."""
    from mesoslike.master.outbox import Send
    from mesoslike.wire import messages as m
    from mesoslike.wire.batching import unbatched

    if isinstance(message, (m.Updates, m.StatusUpdateAcks)):   # the harness reads them item by item
        return [Send(peer, message)]
    return [Send(peer, item) for item in unbatched(message)]


def measure_agent(tasks: int, batch: int) -> dict[str, float]:
    """An AgentCore's CPU µs a task for what the simulated agents of the
    control round do: RUN_TASKS in, each launch started and ended at once,
    its three updates acknowledged (each the next only once the one before
    is); the collector's young generation as large as theirs."""
    from collections import deque

    from mesoslike.agent.core import AgentCore, LaunchTask, SendToMaster
    from mesoslike.clock import SystemClock
    from mesoslike.resources import Resources
    from mesoslike.wire import AgentInfo, FrameworkInfo, MasterInfo, TaskInfo
    from mesoslike.wire import messages as m
    from mesoslike.young_collections import pass_over_young_objects_less_often

    pass_over_young_objects_less_often()   # as the simulated agents' process does (LongLivedObjects().start())
    core = AgentCore(SystemClock(), AgentInfo(hostname="sim-0", resources=Resources.parse("cpus:1000;mem:1000000")))
    core.tick()
    core.on_message(m.AgentRegistered("agent-0", MasterInfo("m", "tcp://127.0.0.1:1"), 1e6, accepts_batches=True))
    framework = FrameworkInfo("bench", "*", id="fw-0")
    need = Resources.parse("cpus:0.01;mem:1")
    infos = [TaskInfo(f"t{i:07d}", "agent-0", "true", need) for i in range(tasks)]
    spent = {"run": 0.0, "started_exited": 0.0, "acks": 0.0}

    def carry_out(commands: list, sent: list) -> None:
        queue = deque(commands)
        while queue:
            command = queue.popleft()
            if isinstance(command, SendToMaster):
                sent.append(command.message)
            elif isinstance(command, LaunchTask):
                began = time.thread_time()
                queue.extend(core.on_task_started(command.framework.id, command.task.task_id, 1))
                queue.extend(core.on_task_exited(command.framework.id, command.task.task_id, 0))
                spent["started_exited"] += time.thread_time() - began

    sent: list = []
    for i in range(0, tasks, batch):
        began = time.thread_time()
        commands = core.on_message(m.RunTasks(framework, infos[i:i + batch]))
        spent["run"] += time.thread_time() - began
        carry_out(commands, sent)
    while sent:
        updates = [message for message in sent if isinstance(message, m.StatusUpdate)]
        sent = []
        for i in range(0, len(updates), batch):
            acks = m.StatusUpdateAcks([m.StatusUpdateAck("agent-0", u.framework_id, u.status.task_id, u.status.uuid)
                                       for u in updates[i:i + batch]])
            began = time.thread_time()
            commands = core.on_message(acks)
            spent["acks"] += time.thread_time() - began
            carry_out(commands, sent)
    return {"agent." + kind: 1e6 * seconds / tasks for kind, seconds in spent.items()}


def measure_driver(tasks: int, batch: int) -> dict[str, float]:
    """A SchedulerDriver's CPU µs a task (three updates) for its update
    path: UPDATES in, the callback of a scheduler that does nothing, the
    acknowledgements batched and encoded (no socket)."""
    from mesoslike import FrameworkInfo, Scheduler, SchedulerDriver
    from mesoslike.driver.core import SubscriptionState
    from mesoslike.wire import MasterInfo, TaskStatus
    from mesoslike.wire import messages as m
    from mesoslike.wire.batching import batch_frames
    from mesoslike.wire.codec import CODEC

    class Nothing(Scheduler):
        def status_update(self, driver, status):  # type: ignore[no-untyped-def]
            pass

    driver = SchedulerDriver(Nothing(), FrameworkInfo("bench", "*"), master="tcp://127.0.0.1:1")
    core = driver._core
    core.state = SubscriptionState.SUBSCRIBING
    driver._execute(core.receive(m.Subscribed("fw-0", 0.0, MasterInfo("m", "tcp://127.0.0.1:1"),
                                              accepts_batches=True)))
    driver._run_pending()
    frames: list = []
    driver._send = lambda message: frames.extend(batch_frames(message, CODEC.encode))  # type: ignore[method-assign]
    updates = 3 * tasks
    batches = [m.Updates([TaskStatus(task_id=f"t{j // 3:07d}", state="TASK_RUNNING", agent_id="agent-0",
                                     uuid=f"{j:036d}", framework_id="fw-0") for j in range(i, min(i + batch, updates))])
               for i in range(0, updates, batch)]
    # the driver's own path for a message from the master where it has one (_take: UPDATES' new updates as
    # one command a run), else what it did before
    take = getattr(driver, "_take", None) or (lambda message: driver._execute(core.receive(message)))
    began = time.thread_time()
    for message in batches:
        take(message)
        driver._run_pending()
        driver._send_outgoing()
    spent = time.thread_time() - began
    assert len(core.delivered) == min(updates, core.delivered.capacity), len(core.delivered)
    return {"driver.update": 1e6 * spent / tasks}


def measure_framework(tasks: int, batch: int, agents: int = 10, staging: int = 2000) -> dict[str, float]:
    """The framework process of the control round in process: a
    ``CommandScheduler`` (``mesoslike run``'s, staging up to ``staging``
    tasks an agent as the round's) on a ``SchedulerDriver``, no socket. An
    OFFERS of ``agents`` offers (``framework.offers``: decoded, the
    scheduler's launches, the ACCEPTs encoded), then each launched task's
    STARTING, RUNNING and FINISHED in UPDATES frames of ``batch``
    (``framework.updates``: decoded, each update's callback, the
    acknowledgements batched and encoded), until every task has ended; CPU
    µs a task, the collector's passes included."""
    import random
    import threading

    from mesoslike import Offer, Resources, SchedulerDriver
    from mesoslike.driver.core import SubscriptionState
    from mesoslike.driver.driver import DriverStatus
    from mesoslike.wire import MasterInfo, TaskStatus
    from mesoslike.wire import messages as m
    from mesoslike.wire.batching import batch_frames, unbatched
    from mesoslike.wire.codec import CODEC
    from mesoslike_frameworks.command import CommandScheduler, framework_info

    class Bench(CommandScheduler):
        max_staging_per_agent = staging

    scheduler = Bench("true", Resources.parse("cpus:0.01;mem:1"), tasks, "bench0")
    driver = SchedulerDriver(scheduler, framework_info("bench0", "*"), master="tcp://127.0.0.1:1")
    core = driver._core
    core.state = SubscriptionState.SUBSCRIBING
    driver._status, driver._thread = DriverStatus.RUNNING, threading.current_thread()   # its calls act at once
    driver._execute(core.receive(m.Subscribed("fw-0", 0.0, MasterInfo("m", "tcp://127.0.0.1:1"),
                                              accepts_batches=True)))
    driver._run_pending()
    frames: list = []
    driver._send = lambda message: frames.extend(batch_frames(message, CODEC.encode))  # type: ignore[method-assign]
    rng = random.Random(1)
    spent = {"offers": 0.0, "updates": 0.0}
    messages = {"STARTING": "", "RUNNING": "started as pid 1", "FINISHED": "command exited with status 0"}
    offer_round = 0

    def step(kind: str, frame: bytes) -> None:
        began = time.thread_time()
        driver._take(CODEC.decode(frame))
        driver._run_pending()
        driver._send_outgoing()
        spent[kind] += time.thread_time() - began

    while not scheduler.finished.is_set():
        offer_round += 1
        offers = [Offer(id=f"o{offer_round}-{i}", agent_id=f"agent-{i}", hostname=f"sim-{i}",
                        resources=Resources.parse("cpus:1000;mem:1000000"), framework_id="fw-0")
                  for i in range(agents)]
        frames.clear()
        step("offers", CODEC.encode(m.Offers(offers)))
        launched = [(task.task_id, task.agent_id) for frame in frames for message in unbatched(CODEC.decode(frame))
                    if isinstance(message, m.Accept) for task in message.tasks]
        for state in ("STARTING", "RUNNING", "FINISHED"):
            for i in range(0, len(launched), batch):
                statuses = [TaskStatus(task_id, f"TASK_{state}", agent_id=agent_id, message=messages[state],
                                       source="SOURCE_AGENT", uuid=f"{rng.getrandbits(128):032x}",
                                       timestamp=1.0, exit_code=0 if state == "FINISHED" else None,
                                       framework_id="fw-0") for task_id, agent_id in launched[i:i + batch]]
                frames.clear()
                step("updates", CODEC.encode(m.Updates(statuses)))
    return {"framework." + kind: 1e6 * seconds / tasks for kind, seconds in spent.items()}


def best(tasks: int, agents: int, batch: int, repeat: int, parts: list[str] | None = None) -> dict[str, float]:
    out: dict[str, float] = {}
    parts = parts or ["master"]
    if "master" in parts:
        runs = [measure(tasks, agents, batch) for _ in range(repeat)]
        total = min(runs, key=lambda r: sum(r.values()))
        out.update({**{k: round(v, 2) for k, v in total.items()}, "total": round(sum(total.values()), 2)})
    if "master_wire" in parts:
        runs = [measure(tasks, agents, batch, wire=True) for _ in range(repeat)]
        total = min(runs, key=lambda r: sum(r.values()))
        out.update({**{"wire." + k: round(v, 2) for k, v in total.items()},
                    "wire_total": round(sum(total.values()), 2)})
    if "agent" in parts:
        runs = [measure_agent(tasks, batch) for _ in range(repeat)]
        total = min(runs, key=lambda r: sum(r.values()))
        out.update({**{k: round(v, 2) for k, v in total.items()}, "agent_total": round(sum(total.values()), 2)})
    if "driver" in parts:
        out["driver.update"] = round(min(measure_driver(tasks, batch)["driver.update"] for _ in range(repeat)), 2)
    if "framework" in parts:
        runs = [measure_framework(tasks, 250) for _ in range(repeat)]
        total = min(runs, key=lambda r: sum(r.values()))
        out.update({**{k: round(v, 2) for k, v in total.items()},
                    "framework_total": round(sum(total.values()), 2)})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100, help="items a STATUS_UPDATES / ACKNOWLEDGEMENTS batch")
    parser.add_argument("--repeat", type=int, default=5, help="fresh cores a measurement; the best is kept")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, the trees interleaved")
    parser.add_argument("--tree", action="append", default=[], help="another source tree to measure beside this")
    parser.add_argument("--parts", default="master,agent,driver",
                        help="which cores to measure, comma-separated: master, master_wire (the master core with "
                             "its decoding, batching and encoding), agent, driver, framework")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", help="write the result JSON here")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(best(args.tasks, args.agents, args.batch, args.repeat, args.parts.split(","))))
        return 0
    trees = [ROOT, *[Path(t).resolve() for t in args.tree]]
    results: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    for r in range(args.rounds):
        for tree in (trees if r % 2 == 0 else trees[::-1]):
            figures: dict[str, float] = {}
            for part in args.parts.split(","):   # each part in a process of its own: what one part leaves
                child = subprocess.run(   # behind (the master's cores, for the collector) is not the next one's
                    [sys.executable, str(Path(__file__).resolve()), "--child", "--tasks", str(args.tasks), "--agents",
                     str(args.agents), "--batch", str(args.batch), "--repeat", str(args.repeat), "--parts", part],
                    cwd=tree, check=True, capture_output=True, text=True,
                    env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(tree / "frameworks")])))
                figures.update(json.loads(child.stdout.strip().splitlines()[-1]))
            results[str(tree)].append(figures)
            print(f"round {r + 1} {tree}: {results[str(tree)][-1]} (load {os.getloadavg()[0]:.1f})",
                  file=sys.stderr, flush=True)
    doc = {"command": " ".join(sys.argv), "tasks": args.tasks, "agents": args.agents, "batch": args.batch,
           "parts": args.parts, "load_at_end": [round(x, 2) for x in os.getloadavg()],
           "unit": "CPU us a task (thread_time), best of --repeat fresh cores, per round",
           "rounds": results,
           "median_total": {tree: sorted(r["total"] for r in runs)[len(runs) // 2]
                            for tree, runs in results.items() if "total" in runs[0]},
           "medians": {tree: {key: sorted(r[key] for r in runs)[len(runs) // 2] for key in runs[0]}
                       for tree, runs in results.items()}}
    text = json.dumps(doc, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
