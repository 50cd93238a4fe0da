"""One word-count task: count the words of a shard file, write JSON counts.

    python wordcount_worker.py SHARD_FILE OUTPUT_FILE
"""

import collections
import json
import os
import sys


def main(shard: str, output: str) -> None:
    with open(shard, encoding="utf-8") as handle:
        counts = collections.Counter(handle.read().split())
    partial = output + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(counts, handle)
    os.replace(partial, output)  # readers never see half a file
    print(f"{shard}: {sum(counts.values())} words, {len(counts)} distinct")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
