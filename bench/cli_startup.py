"""What a ``mesoslike`` command costs before it does anything: interpreter
start plus imports, for ``mesoslike --version`` and ``mesoslike run --help``,
and a framework's imports (``run``'s command, the driver and the wire: what a
one-task ``run`` imports besides the command line), beside a bare ``python -c
pass`` (the floor: the same interpreter and site, importing nothing of ours)
in the same interleaved rounds.

The CLI is a registry of commands imported on first use and the package's
public names load on first use (``mesoslike/__init__.py``), so ``run --help``
imports click, the command's own module and the plugin lookup — not the
wire codec, the driver, the master or the Fuxi scheduler. ``--previous REV``
measures a git revision too (exported with ``git archive`` and run from
there with this interpreter), the baseline before a change, in the same
rounds.

Each figure is the median over ``--rounds`` of wall time and of CPU time
(user + system of the child), with the modules each command imported
(``-X importtime``).

    python bench/cli_startup.py --previous main --out bench/results/cli_startup.json

``--instructions`` also counts each command's user-space instructions once
under valgrind's callgrind (Debian's ``valgrind``): deterministic, where
the times of a shared VM are not.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from benchlib import callgrind_instructions, finish, git_state, start  # noqa: E402

CODE_FILES = ["mesoslike/__init__.py", "mesoslike/cli/__init__.py", "mesoslike/cli/options.py", "mesoslike/plugins.py",
              "frameworks/mesoslike_frameworks/command_cli.py", "frameworks/mesoslike_frameworks/command.py",
              "mesoslike/allocator/__init__.py", "mesoslike/allocator/sorter.py", "mesoslike/driver/driver.py",
              "bench/cli_startup.py"]
#: what is timed: name -> the interpreter's arguments
COMMANDS = {"python -c pass": ["-c", "pass"],
            "mesoslike --version": ["-m", "mesoslike", "--version"],
            "mesoslike run --help": ["-m", "mesoslike", "run", "--help"],
            # what `mesoslike run` imports to run (its command, the driver, the wire), the command line aside
            "a framework's imports": ["-c", "import mesoslike.driver.driver, mesoslike_frameworks.command"]}


def export(rev: str, into: Path) -> list[str]:
    """The tree of ``rev`` under ``into``; the sys.path entries that import it."""
    archive = subprocess.run(["git", "archive", "--format=tar", rev], cwd=ROOT, capture_output=True, check=True,
                             timeout=120).stdout
    with tempfile.TemporaryFile() as tar_file:
        tar_file.write(archive)
        tar_file.seek(0)
        with tarfile.open(fileobj=tar_file) as tar:
            tar.extractall(into, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    if (into / "frameworks" / "mesoslike_frameworks").is_dir():
        return [str(into), str(into / "frameworks")]
    # the old layout: frameworks/ installed as mesoslike.frameworks through a package_dir mapping
    (into / "mesoslike" / "frameworks").symlink_to(into / "frameworks")
    return [str(into)]


def timed(args: list[str], env: dict[str, str], cwd: str) -> tuple[float, float]:
    """(wall s, child CPU s) of one run of the interpreter with ``args`` in
    ``cwd`` (not the checkout: ``-m`` puts the working directory first on
    sys.path, where ``mesoslike/`` would win over ``--previous``'s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True, timeout=60)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imported(args: list[str], env: dict[str, str], cwd: str) -> list[str]:
    """The modules a run of ``args`` imports (``-X importtime``)."""
    done = subprocess.run([sys.executable, "-X", "importtime", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, check=True, timeout=60)
    return [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")
            and not line.rstrip().endswith("| package")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--previous", metavar="REV", help="a git revision measured in the same rounds")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--instructions", action="store_true",
                        help="also count each command's instructions once (valgrind's callgrind)")
    options = parser.parse_args(argv)
    commit, dirty = git_state(CODE_FILES)
    previous = None if not options.previous else subprocess.run(
        ["git", "rev-parse", options.previous], cwd=ROOT, capture_output=True, text=True, check=True,
        timeout=10).stdout.strip()
    doc, started, load = start("cli_startup", argv, {"commit": commit, "dirty": dirty,
                                                     "previous": options.previous, "previous_commit": previous})
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSTARTUP")}
    envs = {"current": env}
    with tempfile.TemporaryDirectory(prefix="cli-startup-") as scratch:
        if options.previous:
            tree = Path(scratch) / "previous"
            envs["previous"] = {**env, "PYTHONPATH": os.pathsep.join(export(options.previous, tree))}
        samples: dict[tuple[str, str], list[tuple[float, float]]] = {
            (code, name): [] for code in envs for name in COMMANDS}
        for _ in range(options.rounds):   # interleaved: the machine's load falls on all alike
            for (code, name), runs in samples.items():
                runs.append(timed(COMMANDS[name], envs[code], scratch))
        results = []
        for (code, name), runs in samples.items():
            modules = imported(COMMANDS[name], envs[code], scratch)
            results.append({
                "code": code, "command": name, "rounds": len(runs),
                "wall_ms_median": round(1000 * statistics.median(w for w, _ in runs), 1),
                "cpu_ms_median": round(1000 * statistics.median(c for _, c in runs), 1),
                "modules_imported": len(modules),
                "mesoslike_modules": sorted(m for m in modules if m.startswith("mesoslike")),
                "imports_wire_codec": "mesoslike.wire.codec" in modules,
                "imports_zmq": "zmq" in modules})
            if options.instructions:
                results[-1]["instructions"] = callgrind_instructions(COMMANDS[name], envs[code], scratch, 600)
            print(f"{code:9} {name:24} wall {results[-1]['wall_ms_median']:7.1f} ms  "
                  f"cpu {results[-1]['cpu_ms_median']:7.1f} ms  {len(modules)} modules", file=sys.stderr)
    doc["results"] = results
    finish(doc, started, load, options.out, lambda line: print(line, file=sys.stderr),
           code_changed=git_state(CODE_FILES)[1] != dirty)


if __name__ == "__main__":
    main()
