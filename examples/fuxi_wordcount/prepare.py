"""Prepare the Fuxi word count: text shards on the agents, a manifest, the job file.

    python prepare.py --work-dir DIR [--agents 3] [--shards 12] [--replicas 2] [--seed 1] --job OUT.toml

writes deterministic text (``wc.VOCABULARY`` drawn with Zipf-like weights,
a few hundred KB in all) as ``--shards`` shards, each placed on
``--replicas`` of the machines ``node-0`` ... ``node-<agents-1>`` (the names
``mesoslike local`` gives its agents) as ``DIR/data/<node>/shard-<i>.txt``;
``DIR/manifest.json`` records where each shard is. The job file has a
``map`` unit (one instance per shard, its ``data`` = the nodes holding the
shard, so the scheduler can run it where its data is) and a ``reduce`` unit
that runs after it. Earlier shards and outputs in DIR are removed first.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shlex
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wc  # noqa: E402  (the programs the job runs; this directory)

__all__ = ["placement", "shard_text", "prepare", "job_toml", "main"]

WC = Path(wc.__file__).resolve()
WORDS_PER_SHARD = 4000
MAP_SECONDS = 0.5
INSTANCE = "{instance}"     # the runtime puts the instance number here


def hosts(agents: int) -> list[str]:
    return [f"node-{i}" for i in range(agents)]


def placement(shards: int, agents: int, replicas: int, seed: int) -> list[list[str]]:
    """Per shard, the ``replicas`` distinct nodes holding it: the first
    round-robin (every node is first holder of about as many shards), the
    others drawn at random (seeded)."""
    if not 1 <= replicas <= agents:
        raise ValueError(f"--replicas must be between 1 and --agents ({agents}), got {replicas}")
    rng = random.Random(f"placement-{seed}")
    names = hosts(agents)
    placed = []
    for index in range(shards):
        first = names[index % agents]
        placed.append([first, *rng.sample([h for h in names if h != first], replicas - 1)])
    return placed


def shard_text(index: int, seed: int, words: int = WORDS_PER_SHARD) -> str:
    """Sentences of Zipf-distributed words (the rank-r word has weight 1/r)."""
    rng = random.Random(f"shard-{seed}-{index}")
    vocabulary = list(dict.fromkeys(wc.VOCABULARY))
    weights = [1.0 / rank for rank in range(1, len(vocabulary) + 1)]
    drawn = rng.choices(vocabulary, weights, k=words)
    lines, start = [], 0
    while start < len(drawn):
        length = rng.randint(6, 18)
        sentence = drawn[start:start + length]
        start += length
        if rng.random() < 0.3 and len(sentence) > 3:
            sentence[len(sentence) // 2] += ","
        lines.append(" ".join(sentence).capitalize() + rng.choice(".....?!"))
    return "\n".join(lines) + "\n"


def job_toml(work_dir: Path, placed: list[list[str]], agents: int, python: str, seconds: float) -> str:
    """The job file: ``map`` (one instance per shard, located by ``data``), then ``reduce``."""
    def command(*args: str) -> str:
        return " ".join(a if a == INSTANCE else shlex.quote(a) for a in (python, str(WC), *args))

    q = json.dumps       # a JSON string is a valid TOML basic string
    data = ",\n".join(f"  [{', '.join(q(h) for h in holders)}]" for holders in placed)
    map_command = command("map", INSTANCE, "--work-dir", str(work_dir), "--seconds", f"{seconds:g}")
    reduce_command = command("reduce", "--work-dir", str(work_dir))
    return f"""\
# The Fuxi word count (examples/fuxi_wordcount), written by prepare.py:
# {len(placed)} shards on {agents} nodes; `mesoslike fuxi submit --wait` this file.

[job]
name = "wordcount"
quota_group = "default"
priority = 100
policy = "FIFO"

[job.backup]              # a straggling map gets a copy elsewhere; both write the same output
enabled = true
min_finished_fraction = 0.5
slower_factor = 2.0
min_runtime = 1.0

[[job.units]]
name = "map"
slots = {agents * 2}
cpus = 0.2
mem = 64
instances = {len(placed)}
max_attempts = 3
command = {q(map_command)}
# per instance (shard), the machines holding its data: run it there if possible
data = [
{data},
]

[[job.units]]
name = "reduce"
after = ["map"]
slots = 1
cpus = 0.2
mem = 128
instances = 1
max_attempts = 3
command = {q(reduce_command)}
"""


def prepare(work_dir: Path, job: Path, agents: int = 3, shards: int = 12, replicas: int = 2, seed: int = 1,
            words: int = WORDS_PER_SHARD, seconds: float = MAP_SECONDS, python: str = sys.executable) -> dict:
    """Write the shards, the manifest and the job file; returns the manifest."""
    if agents < 1 or shards < 1:
        raise ValueError("--agents and --shards must be >= 1")
    work_dir = work_dir.resolve()
    placed = placement(shards, agents, replicas, seed)
    for old in (work_dir / "data").glob("*/shard-*.txt"):
        old.unlink()
    shutil.rmtree(work_dir / "out", ignore_errors=True)
    manifest = {"seed": seed, "agents": hosts(agents), "replicas": replicas, "shards": []}
    for index, holders in enumerate(placed):
        text = shard_text(index, seed, words).encode("utf-8")
        for host in holders:
            path = wc.shard_path(work_dir, host, index)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text)
        manifest["shards"].append({"index": index, "hosts": holders, "bytes": len(text),
                                   "sha256": hashlib.sha256(text).hexdigest()})
    (work_dir / "out").mkdir(parents=True, exist_ok=True)
    wc.manifest_path(work_dir).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    job.parent.mkdir(parents=True, exist_ok=True)
    job.write_text(job_toml(work_dir, placed, agents, python, seconds), encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="where data/, out/ and the manifest go")
    parser.add_argument("--job", type=Path, required=True, help="the job file to write")
    parser.add_argument("--agents", type=int, default=3, help="machines node-0 ... node-<agents-1>")
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--replicas", type=int, default=2, help="machines holding each shard")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--words", type=int, default=WORDS_PER_SHARD, help="words per shard")
    parser.add_argument("--map-seconds", type=float, default=MAP_SECONDS,
                        help="each map spreads its reading over at least this long (visible progress)")
    args = parser.parse_args(argv)
    try:
        manifest = prepare(args.work_dir, args.job, args.agents, args.shards, args.replicas, args.seed,
                           args.words, args.map_seconds)
    except ValueError as exc:
        parser.error(str(exc))
    size = sum(shard["bytes"] for shard in manifest["shards"])
    print(f"prepared {len(manifest['shards'])} shards ({size // 1024} KB) on node-0..node-{args.agents - 1}, "
          f"{args.replicas} cop{'y' if args.replicas == 1 else 'ies'} each, in {args.work_dir.resolve()}/data; "
          f"job file {args.job}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
