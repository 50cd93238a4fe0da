"""The Fuxi word count's programs: ``map``, ``reduce`` and ``verify``.

``prepare.py`` writes the text shards into the agents' work directories
(``DIR/data/<node>/shard-<i>.txt``, each shard on several nodes), a manifest
(``DIR/manifest.json``: which nodes hold which shard, its size and SHA-256)
and the job file whose instances run these commands::

    wc.py map INSTANCE --work-dir DIR [--seconds S]   # one shard -> DIR/out/map-<i>.json
    wc.py reduce --work-dir DIR                       # every map output -> DIR/out/wordcount.json
    wc.py verify --work-dir DIR                       # a single-process count == wordcount.json?

``map`` reads its shard from ``DIR/data/$FUXI_HOSTNAME/`` when this machine
holds it (a *local* read) and otherwise from a node that does (a *remote*
read; on a real cluster that would cross the network), printing
``FUXI_PROGRESS <fraction>`` lines as it reads; a copy whose SHA-256 is not
the manifest's is skipped for another. Outputs are written to a
temporary file and renamed, so a rerun or a backup copy of an instance just
replaces the same file with the same counts.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable

__all__ = ["VOCABULARY", "tokenize", "count_words", "load_manifest", "shard_path", "run_map", "run_reduce",
           "verify", "write_json_atomically", "main"]

#: the words of the generated text, most frequent first (prepare.py draws them with Zipf-like weights)
VOCABULARY = tuple("""
the of and to a in is it that was for on are with as he be at by this had not but from or have an they which
one you were her all she there would their we him been has when who will more no if out so said what up its
about into than them can only other new some could time these two may then do first any my now such like our
over man me even most made after also did many before must through back years where much your way well down
should because each just those people how too little state good very make world still own see men work long
get here between both life being under never day same another know while last might us great old year off
come since against go came right used take three states himself few house use during without again place
american around however home small found thought went say part once general high upon school every does got
united left number course war until always away something fact though water less public put think almost hand
enough far took head yet government system better set told nothing night end why called didn find going look
asked later knew point next program city business give group toward young days let room president side social
given present several order national possible rather second face per among form important often things looked
early white case john become large big need four within felt along children saw best church ever least power
development light thing seemed family interest want members others mind country area done turned although open
god service certain kind problem began different door thus help sense means whole matter perhaps itself york
times law human line above name example action company hands local show five history whether gave either act
today feet across taken past quite anything seen having death week experience body word half really field am
car words already themselves information tell together college shall money period held keep sure free real
probably seems behind cannot miss political air question making office brought whose special heard major
problems ago became federal moment study available known result street economic boy position reason change
south board individual job areas society west close turn love community true court force full seem wife future
""".split())

_WORD = re.compile(r"[a-z]+")
PROGRESS_STEPS = 10


def tokenize(text: str) -> list[str]:
    """Lower-case runs of letters: punctuation and capitals do not make new words."""
    return _WORD.findall(text.lower())


def count_words(lines: Iterable[str]) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for line in lines:
        counts.update(tokenize(line))
    return counts


# ------------------------------------------------------------ the layout
def manifest_path(work_dir: Path) -> Path:
    return work_dir / "manifest.json"


def load_manifest(work_dir: Path) -> dict:
    try:
        return json.loads(manifest_path(work_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"no {manifest_path(work_dir)}: run prepare.py --work-dir {work_dir} first") from None


def shard_path(work_dir: Path, host: str, index: int) -> Path:
    return work_dir / "data" / host / f"shard-{index}.txt"


def map_output(work_dir: Path, index: int) -> Path:
    return work_dir / "out" / f"map-{index}.json"


def result_path(work_dir: Path) -> Path:
    return work_dir / "out" / "wordcount.json"


def write_json_atomically(path: Path, document: dict) -> None:
    """Readers see the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------- map
def copies(work_dir: Path, shard: dict, host: str, attempt: int) -> list[tuple[Path, bool]]:
    """The shard's copies to try, as (file, local?): this host's if it holds
    one, then the other holders' (starting with a different one on each
    attempt)."""
    index = shard["index"]
    local = [(shard_path(work_dir, host, index), True)] if host in shard["hosts"] else []
    others = [h for h in shard["hosts"] if h != host]
    turn = (attempt - 1) % len(others) if others else 0
    remote = [(shard_path(work_dir, h, index), False) for h in others[turn:] + others[:turn]]
    return [(path, is_local) for path, is_local in local + remote if path.is_file()]


class _Progress:
    """``FUXI_PROGRESS`` lines, one per tenth of the shard read, never going
    back (a second copy read after a corrupt one only continues them), paced
    so that the whole read takes at least ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.reported = 0

    def update(self, fraction: float) -> None:
        step = int(fraction * PROGRESS_STEPS)
        if step > self.reported:
            self.reported = step
            print(f"FUXI_PROGRESS {min(fraction, 1.0):.2f}", flush=True)
            if self.seconds > 0:
                time.sleep(self.seconds / PROGRESS_STEPS)


def count_copy(path: Path, sha256: str, progress: _Progress) -> collections.Counter | None:
    """The words of one copy, or None if it is corrupt (its SHA-256 is not ``sha256``)."""
    size = path.stat().st_size or 1
    counts: collections.Counter = collections.Counter()
    digest = hashlib.sha256()
    done = 0
    with open(path, "rb") as handle:
        for raw in handle:
            digest.update(raw)
            counts.update(tokenize(raw.decode("utf-8", errors="replace")))
            done += len(raw)
            progress.update(done / size)
    return counts if digest.hexdigest() == sha256 else None


def run_map(work_dir: Path, index: int, host: str, attempt: int = 1, seconds: float = 0.0) -> dict:
    """Count one shard's words into ``out/map-<index>.json``; returns that
    document. A corrupt copy (SHA-256 not the manifest's) is skipped for the
    next one; the map fails only if no good copy is left."""
    manifest = load_manifest(work_dir)
    if not 0 <= index < len(manifest["shards"]):
        raise SystemExit(f"map: no shard {index} (the manifest has {len(manifest['shards'])})")
    shard = manifest["shards"][index]
    candidates = copies(work_dir, shard, host, attempt)
    if not candidates:
        raise SystemExit(f"map {index}: no copy of the shard on any of {', '.join(shard['hosts'])}")
    progress = _Progress(seconds)
    for source, local in candidates:
        counts = count_copy(source, shard["sha256"], progress)
        if counts is not None:
            break
        print(f"map {index}: {source} is corrupt (its SHA-256 differs from the manifest's)", file=sys.stderr)
    else:
        raise SystemExit(f"map {index}: every copy of the shard is corrupt")
    document = {"instance": index, "attempt": attempt, "host": host, "source": source.parent.name,
                "local": local, "words": sum(counts.values()), "counts": dict(counts)}
    write_json_atomically(map_output(work_dir, index), document)
    where = "locally" if local else f"remotely from {source.parent.name}"
    print(f"map {index}: {document['words']} words, {len(counts)} distinct, read {where} on {host or '?'}")
    return document


# ---------------------------------------------------------------- reduce
def run_reduce(work_dir: Path, top: int = 10) -> dict:
    """Merge every map output into ``out/wordcount.json``; print the top words."""
    manifest = load_manifest(work_dir)
    outputs, missing = [], []
    for index in range(len(manifest["shards"])):
        try:
            outputs.append(json.loads(map_output(work_dir, index).read_text(encoding="utf-8")))
        except FileNotFoundError:
            missing.append(index)
    if missing:
        raise SystemExit(f"reduce: no output of map instance(s) {', '.join(map(str, missing))} "
                         f"(reduce must run after every map has finished)")
    total: collections.Counter = collections.Counter()
    for output in outputs:
        total.update(output["counts"])
    local = sum(1 for output in outputs if output["local"])
    document = {"shards": len(outputs), "words": sum(total.values()), "distinct": len(total),
                "local_reads": local, "remote_reads": len(outputs) - local,
                "counts": dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))}
    write_json_atomically(result_path(work_dir), document)
    print(f"reduce: {document['words']} words, {document['distinct']} distinct, from {len(outputs)} map outputs")
    print(top_words_line(document, top))
    return document


def top_words_line(document: dict, top: int = 10) -> str:
    words = list(document["counts"].items())[:top]
    return f"top {len(words)} words: " + ", ".join(f"{word} {count}" for word, count in words)


# ---------------------------------------------------------------- verify
def single_process_count(work_dir: Path) -> collections.Counter:
    """Every shard counted once, here, from its first holder's copy."""
    total: collections.Counter = collections.Counter()
    for shard in load_manifest(work_dir)["shards"]:
        with open(shard_path(work_dir, shard["hosts"][0], shard["index"]), encoding="utf-8") as handle:
            total.update(count_words(handle))
    return total


def verify(work_dir: Path) -> tuple[bool, str]:
    """(equal?, one-line summary) of wordcount.json against a single-process count."""
    expected = single_process_count(work_dir)
    try:
        result = json.loads(result_path(work_dir).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return False, f"verify: FAILED: no {result_path(work_dir)} (did the reduce run?)"
    got = collections.Counter(result["counts"])
    shards = result["shards"]
    reads = f"{result['local_reads']}/{shards} map reads local ({100 * result['local_reads'] // max(shards, 1)}%)"
    if got == expected:
        return True, (f"verify: OK: {sum(expected.values())} words, {len(expected)} distinct, in {shards} shards "
                      f"match a single-process count; {reads}")
    differ = sorted(set(got) | set(expected), key=lambda w: (-abs(got[w] - expected[w]), w))
    differ = [w for w in differ if got[w] != expected[w]]
    sample = ", ".join(f"{w!r} {got[w]} (expected {expected[w]})" for w in differ[:3])
    return False, f"verify: FAILED: {len(differ)} word(s) counted wrong: {sample}; {reads}"


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    map_cmd = commands.add_parser("map", help="count one shard's words")
    map_cmd.add_argument("instance", type=int)
    map_cmd.add_argument("--seconds", type=float, default=0.0,
                         help="spread the reading over at least this long (visible progress)")
    map_cmd.add_argument("--host", default=None, help="this machine's name (default: $FUXI_HOSTNAME)")
    reduce_cmd = commands.add_parser("reduce", help="merge the map outputs")
    commands.add_parser("verify", help="compare wordcount.json with a single-process count")
    for command in (map_cmd, reduce_cmd, commands.choices["verify"]):
        command.add_argument("--work-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    work_dir = args.work_dir.resolve()
    if args.command == "map":
        host = args.host if args.host is not None else os.environ.get("FUXI_HOSTNAME", "")
        run_map(work_dir, args.instance, host, int(os.environ.get("FUXI_ATTEMPT", "1") or 1), args.seconds)
        return 0
    if args.command == "reduce":
        run_reduce(work_dir)
        return 0
    ok, summary = verify(work_dir)
    print(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
