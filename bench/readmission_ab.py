#!/usr/bin/env python3
"""A new leader's re-admission CPU an agent, two versions of some functions
measured in ONE process, alternating every ``--batch`` agents.

``bench/reregistration_cpu.py --baseline-src`` measures the two trees in two
processes one after the other; on the machine shared with other sessions
(load 50-200 on two cores) the load moves between the two by more than the
change measured (failover30h: 48.2 -> 38.2 us an agent one way, 40.1 against
41.0 the other way, for a change that turned out to save nothing). Here two
cores recovered from the same registry re-admit the same agents, one with the
functions of this tree, the other with the functions named by ``--swap``
compiled from another tree's source (``--base-src``, a ``git archive`` of the
commit to compare with), in the globals of this tree's module; the two take
turns every ``--batch`` agents (which goes first alternates by round), so both
see the same load. Only the named functions differ: anything else they call
is this tree's.

Reported: CPU an agent (``time.process_time``) handling its REREGISTER_AGENT
(the core's ``on_message`` and the turn's ``tick``; decoding not counted, the
frames decoded just before each batch), by round and the best of the rounds;
and apart, what is left to do after the answers (``MasterCore.settle``: the
task records made after the answer, failover30i; nothing for a tree without
it), and the sum of the two. With ``--remember``, apart too, the runtime's
memory of each frame (``MasterRuntime._remember_registration``, swappable
like the rest; each frame a new object, as received).

    python bench/readmission_ab.py --base-src /tmp/base --agents 20000 --rounds 4 \\
        --swap mesoslike.master.agents:AgentLifecycle._admit_reregistered
"""

from __future__ import annotations

import argparse
import ast
import gc
import importlib
import json
import os
import sys
import textwrap
import time
from collections import OrderedDict
from types import SimpleNamespace
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def compiled_from(base_src: Path, spec: str) -> tuple[type, str, Callable[..., Any]]:
    """(class, name, function) for ``module:Class.function`` compiled from ``base_src``'s copy of the module."""
    module_name, _, qualified = spec.partition(":")
    class_name, _, function_name = qualified.partition(".")
    module = importlib.import_module(module_name)
    source = (base_src / (module_name.replace(".", "/") + ".py")).read_text()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == function_name)
    segment = ast.get_source_segment(source, fn)
    assert segment is not None
    namespace: dict[str, Any] = {}
    # this tree's globals, and the base's constants this tree no longer has (failover30q: the base's
    # _remember_registration reads its _REGISTRATIONS_KEPT)
    base_globals = dict(vars(module))
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id not in base_globals:
                    try:
                        base_globals[target.id] = ast.literal_eval(node.value)
                    except ValueError:
                        pass
    exec(compile("from __future__ import annotations\n" + textwrap.dedent(segment), f"{base_src}:{spec}", "exec"),
         base_globals, namespace)
    return getattr(module, class_name), function_name, namespace[function_name]


def measure(args: argparse.Namespace) -> dict:
    from mesoslike.clock import FakeClock
    from mesoslike.master import MasterConfig, MasterCore
    from mesoslike.master.registry import Registry
    from mesoslike.master.runtime import MasterRuntime
    from mesoslike.wire import MasterInfo, decode

    from simagents import registrations

    if args.defer_task_records or args.eager_task_records:   # this tree's records after the answer, or at once
        from mesoslike.master.agents import AgentLifecycle
        AgentLifecycle.defer_task_records = not args.eager_task_records
    swaps = [compiled_from(args.base_src, spec) for spec in args.swap]
    mine = [(cls, name, getattr(cls, name)) for cls, name, _ in swaps]
    _, frames, _ = registrations(0, args.agents, args.tasks_per_agent, args.frameworks)
    peers = [f"agent-{i}".encode() for i in range(args.agents)]
    first = MasterCore(FakeClock(), MasterInfo("m1", "tcp://127.0.0.1:1"), MasterConfig())
    for peer, frame in zip(peers, frames):
        first.on_message(peer, decode(frame))
    document = first.registry.to_document()
    del first
    rounds: dict[str, list[float]] = {"this": [], "base": []}
    later: dict[str, list[float]] = {"this": [], "base": []}
    remembered: dict[str, list[float]] = {"this": [], "base": []}
    for number in range(args.rounds):
        cores = {name: (MasterCore(FakeClock(), MasterInfo("m2", "tcp://127.0.0.1:2"), MasterConfig(),
                                   registry=Registry.from_document(document)), [0.0])
                 for name in ("this", "base")}
        # the runtime's memory of registration frames (_remember_registration's attributes), apart
        memories = {name: SimpleNamespace(_registrations=OrderedDict(), _registration_digests=OrderedDict())
                    for name in cores}
        remembering = {name: [0.0] for name in cores}
        order = ("base", "this") if number % 2 == 0 else ("this", "base")
        for start in range(0, args.agents, args.batch):
            for name in order:
                core, spent = cores[name]
                for cls, function_name, function in (swaps if name == "base" else mine):
                    setattr(cls, function_name, function)
                # each a new object, as received: a bytes object keeps its hash once computed
                received = [bytes(bytearray(frame)) for frame in frames[start:start + args.batch]]
                messages = [decode(frame) for frame in received]
                gc.disable()   # as the runtime's turn
                began = time.process_time()
                for peer, message in zip(peers[start:start + args.batch], messages):
                    core.on_message(peer, message)
                core.tick()
                spent[0] += time.process_time() - began
                if args.remember:
                    began = time.process_time()
                    memory = memories[name]
                    for peer, frame, message in zip(peers[start:start + args.batch], received, messages):
                        MasterRuntime._remember_registration(memory, peer, frame, message)  # type: ignore[arg-type]
                    remembering[name][0] += time.process_time() - began
                gc.enable()
        for name, (core, spent) in cores.items():
            # what is left to do after the answers (the task records made after them: failover30i),
            # measured apart: the runtime does it in a turn with nothing waiting
            gc.disable()
            began = time.process_time()
            settle = getattr(core, "settle", None)
            if settle is not None:
                settle()
            after = time.process_time() - began
            gc.enable()
            assert len(core.agents) == args.agents, f"{name}: {len(core.agents)} of {args.agents} agents"
            assert sum(len(agent.tasks) for agent in core.agents.values()) == args.agents * args.tasks_per_agent
            rounds[name].append(round(spent[0] / args.agents * 1e6, 2))
            later[name].append(round(after / args.agents * 1e6, 2))
            remembered[name].append(round(remembering[name][0] / args.agents * 1e6, 3))
        del cores, memories
        gc.collect()
    for cls, function_name, function in mine:
        setattr(cls, function_name, function)
    if args.remember:
        result: dict[str, Any] = {"remember_us_per_agent": remembered}
    else:
        result = {}
    return {**result, "handle_us_per_agent": rounds,
            "best_us_per_agent": {name: min(values) for name, values in rounds.items()},
            "after_answers_us_per_agent": later,
            "total_us_per_agent": {name: [round(a + b, 2) for a, b in zip(rounds[name], later[name])]
                                   for name in rounds}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-src", type=Path, required=True, help="the other tree (a git archive of a commit)")
    parser.add_argument("--swap", action="append", required=True,
                        help="module:Class.function to take from --base-src (repeatable)")
    parser.add_argument("--agents", type=int, default=20_000)
    parser.add_argument("--tasks-per-agent", type=int, default=10)
    parser.add_argument("--frameworks", type=int, default=4)
    parser.add_argument("--batch", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--defer-task-records", action="store_true",
                        help="this tree's AgentLifecycle.defer_task_records on (failover30i; the default "
                             "since failover30j)")
    parser.add_argument("--eager-task-records", action="store_true",
                        help="this tree's AgentLifecycle.defer_task_records off: the records made at once")
    parser.add_argument("--remember", action="store_true",
                        help="also the runtime's memory of each registration frame "
                             "(MasterRuntime._remember_registration, its frame a new object as received), "
                             "reported apart: remember_us_per_agent")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = {"benchmark": "re-admission CPU an agent, two versions of some functions alternating in one process",
              "command": "python " + " ".join(sys.argv), "base_src": str(args.base_src), "swap": args.swap,
              "agents": args.agents, "tasks_per_agent": args.tasks_per_agent, "frameworks": args.frameworks,
              "batch": args.batch, "loadavg_start": list(os.getloadavg())}
    result.update(measure(args))
    result["loadavg_end"] = list(os.getloadavg())
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
