#!/bin/bash
# The CPU (its own threads: task-clock) and system calls (tracepoints) of every agent and master a benchmark starts,
# each for its whole life, with perf stat: the processes whose parent is the benchmark's process BENCH_PID (both
# clusters of bench/throughput.py --only before_after: each process's working directory tells its tree). One file
# a process in OUT; bench/agent_watch_summary.py sums them. Needs root (or perf_event_paranoid <= 1).
#
#   python bench/throughput.py --only before_after --before /var/tmp/NAME-base --rounds 8 --out OUT.json &
#   bench/agent_watch.sh $! /var/tmp/NAME-watch
#   python bench/agent_watch_summary.py /var/tmp/NAME-watch --tasks 8000 --after NAME-after --out bench/results/agent-watch-NAME.json
set -u
BENCH=$1
OUT=$2
mkdir -p "$OUT"
EVENTS=task-clock,syscalls:sys_enter_fdatasync,syscalls:sys_enter_mkdir,syscalls:sys_enter_rename,syscalls:sys_enter_openat,syscalls:sys_enter_write,syscalls:sys_enter_pwrite64,syscalls:sys_enter_sendto,syscalls:sys_enter_poll
declare -A seen
while kill -0 "$BENCH" 2>/dev/null; do
  for pid in $(pgrep -P "$BENCH" -f "mesoslike (agent|master) "); do
    [ -n "${seen[$pid]:-}" ] && continue
    seen[$pid]=1
    tree=$(basename "$(readlink /proc/$pid/cwd 2>/dev/null)")
    role=agent
    tr '\0' ' ' < /proc/$pid/cmdline 2>/dev/null | grep -q " master " && role=master
    perf stat --no-inherit -e "$EVENTS" -p "$pid" -o "$OUT/$tree-$role-$pid.txt" > /dev/null 2>&1 &
  done
  sleep 0.3
done
wait
