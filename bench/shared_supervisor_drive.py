#!/usr/bin/env python3
"""The shared supervisor's own work a task, deterministically: an agent's
``TaskExecutor`` with the real agents' isolation (namespaces, cgroups)
launches N tasks ``true`` in batches, at most four in flight, through a
shared supervisor this script starts itself, then ends it with SIGTERM.
``--callgrind OUT``: under callgrind, counting only while the tasks run
(``--instr-atstart=no``, switched on and off by ``callgrind_control``):
its total over N is the instructions a task, within ±0.5 % run to run.
``--strace OUT``: ``strace -c -p`` attached for the same span.
``--cprofile OUT``: cProfile timed by process CPU. ``--wrap CMD``: any
other wrapper of its interpreter (its counts include the start).
``--script``: another tree's ``shared_supervisor.py`` (to compare; this
tree's agent). Needs root (cgroups, namespaces).

    python bench/shared_supervisor_drive.py --tasks 600 --callgrind /tmp/cg.out
    python bench/shared_supervisor_drive.py --tasks 2000 --strace /tmp/st.txt --script /var/tmp/base/mesoslike/agent/shared_supervisor.py
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import benchlib  # noqa: E402
from mesoslike.agent import shared_supervisor as shared  # noqa: E402
from mesoslike.agent import supervisor_link  # noqa: E402
from mesoslike.agent.executor import Launch, LaunchFailed, TaskExecutor, TaskExit  # noqa: E402
from mesoslike.agent.isolation import select_isolation  # noqa: E402
from mesoslike.resources import Resources  # noqa: E402
from mesoslike.wire.types import TaskInfo  # noqa: E402

#: the shared supervisor's script run under cProfile timed by process CPU (not wall time: a send that
#: wakes another process on this CPU is not this one's)
PROFILED = ("import cProfile, runpy, sys, time; out = sys.argv.pop(1); sys.argv[0] = sys.argv[1]; del sys.argv[1]; "
            "p = cProfile.Profile(time.process_time); p.enable()\n"
            "try: runpy.run_path(sys.argv[0], run_name='__main__')\n"
            "except SystemExit: pass\n"
            "finally: p.disable(); p.dump_stats(out)")
ISOLATION = "cgroups/cpu,cgroups/mem,filesystem/linux,namespaces/pid,namespaces/ipc,namespaces/uts"


def drive(executor: TaskExecutor, tasks: int, batch: int) -> None:
    """Launch ``tasks`` tasks ``true``, ``batch`` at a time with at most
    four batches in flight (launch_breakdown's rounds launch them all at
    once: the supervisor's turns, and so its counts, then vary with the
    machine's pace), until every one has ended."""
    resources = Resources.parse("cpus:0.01;mem:16")
    launched = ended = 0
    while ended < tasks:
        room = min(batch, tasks - launched) if launched - ended < 4 * batch else 0
        if room:
            problems = executor.launch_many([Launch("fw", TaskInfo(f"t{launched + i}", "agent-1", "true", resources),
                                                    "agent-1") for i in range(room)])
            assert not any(problems), problems
            launched += room
        ended += ends(executor)
        time.sleep(0.002)


def ends(executor: TaskExecutor) -> int:
    """How many tasks the executor says have ended (forgotten); a failed one stops the run."""
    count = 0
    for event in executor.poll():
        if isinstance(event, (TaskExit, LaunchFailed)):
            if isinstance(event, LaunchFailed) or event.exit_code != 0:
                raise SystemExit(f"a task failed: {event}")
            executor.forget(event.framework_id, event.task_id)
            count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--wrap", default="", help="what runs the shared supervisor's interpreter (a command line)")
    parser.add_argument("--script", default=shared.__file__,
                        help="the shared supervisor's script to run (another tree's, to compare)")
    parser.add_argument("--callgrind", default="",
                        help="run it under callgrind, counting only while the tasks run; its counts in this file")
    parser.add_argument("--strace", default="", help="count its system calls while the tasks run (strace -c), into this file")
    parser.add_argument("--cprofile", default="", help="profile the shared supervisor with cProfile into this file")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ss-drive-"))
    cgroups_root = f"bench-ss-drive-{os.getpid()}"
    executor = TaskExecutor(root / "agent", shared_supervisor=True,
                            isolation=select_isolation(ISOLATION, cgroups_root=cgroups_root))
    assert executor.init_helper is not None, "no init helper: no C compiler?"
    executor.write_agent_pid()
    meta = executor.link.meta
    python = sys.executable
    wrap = shlex.split(args.wrap)
    if args.callgrind:
        wrap = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={args.callgrind}"]
    command = [*wrap, python, "-I", "-S",
               *(["-c", PROFILED, args.cprofile] if args.cprofile else []), args.script, str(meta),
               *supervisor_link._msgspec_option(python)]
    log = open(meta / shared.LOG, "ab")
    proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, env=executor.link._environment())
    try:
        deadline = time.monotonic() + 120
        while (executor.link._running() or (0, None))[0] != proc.pid:
            assert proc.poll() is None and time.monotonic() < deadline, "the shared supervisor did not start"
            time.sleep(0.05)
        assert executor.link.ensure() and executor.link.pid == proc.pid
        if args.callgrind:
            subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, stdout=subprocess.DEVNULL)
        tracer = None
        if args.strace:
            tracer = subprocess.Popen(["strace", "-c", "-o", args.strace, "-p", str(proc.pid)],
                                      stderr=subprocess.DEVNULL)
            time.sleep(1.0)   # attached
        started = time.monotonic()
        drive(executor, args.tasks, args.batch)
        if args.callgrind:
            subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, stdout=subprocess.DEVNULL)
        if tracer is not None:
            tracer.terminate()   # detaches, writing its counts
            tracer.wait()
        print(f"{args.tasks} tasks in {time.monotonic() - started:.1f} s", file=sys.stderr)
    finally:
        executor.link.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=300)
        executor.kill_all(grace_period=0.0)
        executor.release()
        benchlib.sweep_agent_cgroups(root, roots=(cgroups_root,))
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
