"""The wire codec per message type in instructions, not time: user-space
instructions to encode and to decode each of ``bench/wire.py``'s sample
messages, counted by valgrind's callgrind — this tree's codec and, with
``--baseline``, another checkout's (``git worktree add /tmp/wire-base REV``).

Why instructions: on a shared VM ``bench/wire.py``'s microseconds move by
half from one run to the next (its STATUS_UPDATES (100) decoded in 36 and
in 61 µs with the same code, stop 23); an instruction count is the same in
every run with the same hash seed (``PYTHONHASHSEED=0`` here: a random
seed moves a small message's count by up to a quarter — its dictionaries'
probes), so a change of a few percent shows. It says nothing of cache misses or of the machine's speed:
read it beside ``bench/wire.py``'s times.

Each figure: (instructions of a process doing the operation N times minus
those of one doing it 0 times) / N, the process importing the tree's code
(``PYTHONPATH``) and building the samples alike. Needs ``valgrind``
(Debian's ``valgrind``).

    python bench/wire_instructions.py --baseline /tmp/wire-base --out bench/results/wire-instructions.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from benchlib import callgrind_instructions, finish, git_state, start  # noqa: E402

#: operations each count is taken over: fewer for the large messages (callgrind runs ~50x slower)
REPEATS = {"OFFERS (100 offers)": 100, "STATUS_UPDATES (100)": 100, "ACKNOWLEDGEMENTS (100)": 100,
           "ACCEPT (10 tasks)": 500, "RUN_TASK (container, health check, URI)": 500}
DEFAULT_REPEATS = 2000


def operate(tree: str, name: str, op: str, repeats: int) -> None:
    """``--operate``: in a process importing ``tree``'s code, ``op`` (encode or decode) sample ``name`` ``repeats`` times."""
    sys.path[:0] = [tree, str(Path(tree) / "frameworks"), str(HERE)]
    import wire
    codec, message = wire.samples()[name]
    frame = codec.encode(message)
    codec.decode(frame)
    if op == "encode":
        encode = codec.encode
        for _ in range(repeats):
            encode(message)
    else:
        decode = codec.decode
        for _ in range(repeats):
            decode(frame)


def instructions(tree: Path, name: str, op: str, repeats: int) -> int:
    """The user-space instructions callgrind counts in a process doing ``op`` on ``name`` ``repeats`` times."""
    return callgrind_instructions([str(Path(__file__).resolve()), "--operate", str(tree), name, op, str(repeats)],
                                  {**os.environ, "PYTHONPATH": str(tree)}, tree)


def per_operation(tree: Path, name: str, op: str) -> int:
    repeats = REPEATS.get(name, DEFAULT_REPEATS)
    return round((instructions(tree, name, op, repeats) - instructions(tree, name, op, 0)) / repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="a checkout of the baseline tree")
    parser.add_argument("--only", help="comma-separated sample names (default: all of bench/wire.py's)")
    parser.add_argument("--out", help="also write the JSON document here")
    parser.add_argument("--operate", nargs=4, metavar=("TREE", "NAME", "OP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.operate:
        tree, name, op, repeats = args.operate
        operate(tree, name, op, int(repeats))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("bench/wire_instructions.py needs valgrind (apt-get install valgrind)")
    import wire
    names = args.only.split(",") if args.only else list(wire.samples())
    trees = {"this_tree": ROOT, **({"baseline_tree": args.baseline.resolve()} if args.baseline else {})}
    commit, dirty = git_state(["mesoslike", "frameworks", "bench/wire.py", "bench/wire_instructions.py"])
    report, started, load = start("wire_instructions", None, {"commit": commit, "dirty": dirty,
                                                                "baseline": str(args.baseline or "")})
    report["how"] = ("user-space instructions an operation, callgrind: (a process doing it N times - one doing it 0 "
                     "times) / N, N = 2,000 (100-500 for the large samples)")
    for key, tree in trees.items():
        # its bytecode written first: a module compiled in the counted run but read from its .pyc in the
        # run of 0 operations would be counted as the operations' (~25,000 instructions each at N = 2,000)
        subprocess.run([sys.executable, "-m", "compileall", "-q", "mesoslike", "frameworks", "bench"], cwd=tree,
                       capture_output=True, timeout=600)
        report[key] = {}
        for name in names:
            report[key][name] = {op: per_operation(tree, name, op) for op in ("encode", "decode")}
            print(f"[wire_instructions] {key} {name}: {report[key][name]}", file=sys.stderr, flush=True)
    if args.baseline:
        report["this_to_baseline_percent"] = {
            name: {op: round(100 * report["this_tree"][name][op] / report["baseline_tree"][name][op], 1)
                   for op in ("encode", "decode")} for name in names}
    finish(report, started, load, Path(args.out) if args.out else None,
           lambda text: print(f"[wire_instructions] {text}", file=sys.stderr, flush=True))


if __name__ == "__main__":
    main()
