#!/bin/bash
# Instructions a task of one part of bench/control_core.py (its in-process control round), counted by
# valgrind's callgrind over the process and its children: noise-free, where CPU time on this shared
# machine moves by +-20 % from round to round (docs/performance.rst, "Stop 19: the control plane (ctl29p)").
# Two runs, N1 and N2 tasks; their difference over N2 - N1 cancels the start-up (imports, the cores made).
#
#   bench/control_core_instructions.sh TREE PART N1 N2     e.g. bench/control_core_instructions.sh . agent 1000 3000
#
# TREE: a source tree (its mesoslike and frameworks first on the path; its bench/control_core.py run);
# PART: a --parts value of control_core.py (master_wire, agent, framework, ...). Needs valgrind; ~1-3 min a part.
set -euo pipefail
TREE=$(cd "$1" && pwd); PART=$2; N1=$3; N2=$4
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d /var/tmp/control-core-instructions.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
count() {   # the instructions of a run of $1 tasks, its children's included
  mkdir -p "$WORK/$1"
  (cd "$TREE" && PYTHONPATH="$TREE:$TREE/frameworks" valgrind --tool=callgrind --trace-children=yes \
    --callgrind-out-file="$WORK/$1/%p.out" "$PYTHON" bench/control_core.py --parts "$PART" --tasks "$1" \
    --repeat 1 --rounds 1 > /dev/null 2> "$WORK/$1.err") || { cat "$WORK/$1.err" >&2; exit 1; }
  cat "$WORK/$1"/*.out | awk '/^totals:/ {s += $2} END {printf "%d", s}'
}
A=$(count "$N1"); B=$(count "$N2")
echo "$TREE $PART $(( (B - A) / (N2 - N1) )) instructions a task"
