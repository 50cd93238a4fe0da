#!/usr/bin/env python3
"""The image provisioner: what a pull costs, what a cached image costs, and
the two ways of making a task's root filesystem of the layers — an overlay
mount versus a flattened copy — measured in the same run (root needed for
the mount).

Two images are pushed to a local docker-registry (tests/image_registry.py):

``busybox``
    the tests' two-layer image of Debian's static busybox (~2 MB).
``files``
    three layers of ``--files`` random 8 KiB files each (incompressible),
    the upper two replacing a third of the lower one's files.

For each: a cold provision (pull, verify, unpack) into an empty store, a
warm one (from the cache: no request), then ``--rounds`` task root
filesystems each way: ``mount -t overlay`` of the layers with a fresh
upper/work directory, then ``umount``; and :func:`flatten` into a fresh
directory (then removed). The benchmark reports; it never fails on a figure.

    sudo python bench/images.py --out bench/results/images.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from benchlib import blob_ids, finish, start  # noqa: E402
from image_registry import Image, Registry, busybox_image, file_entry, push_image, tar_layer  # noqa: E402

from mesoslike.agent.images import ImageStore, flatten, mount_overlay, unmount  # noqa: E402
from mesoslike.agent.images.layers import disk_usage  # noqa: E402

CODE = ["mesoslike/agent/images/store.py", "mesoslike/agent/images/layers.py", "mesoslike/agent/images/rootfs.py",
        "mesoslike/agent/images/registry.py"]


def log(text: str) -> None:
    print(f"[images] {text}", file=sys.stderr, flush=True)


def files_image(files: int) -> Image:
    layers = []
    for layer in range(3):
        count = files if layer == 0 else files // 3
        layers.append(tar_layer([file_entry(f"data/{n % 50}/f{n}", os.urandom(8192)) for n in range(count)]))
    return Image(layers, {"config": {"Cmd": ["/bin/true"]}})


def timed(action) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def summary(samples: list[float]) -> dict:
    return {"median_ms": round(statistics.median(samples) * 1000, 2), "min_ms": round(min(samples) * 1000, 2),
            "max_ms": round(max(samples) * 1000, 2), "samples": len(samples)}


def measure(store: ImageStore, name: str, rounds: int, work: Path) -> dict:
    cold = timed(lambda: store.provision(name))
    provisioned = store.provision(name)
    warm = [timed(lambda: store.provision(name)) for _ in range(rounds)]
    result = {"layers": len(provisioned.layers), "unpacked_bytes": sum(disk_usage(p) for p in provisioned.layers),
              "cold_provision_s": round(cold, 3), "warm_provision": summary(warm)}
    overlay, flattened = [], []
    for number in range(rounds):
        task = work / f"{name.replace('/', '-')}-{number}"
        for sub in ("upper", "work", "rootfs", "flat"):
            (task / sub).mkdir(parents=True)
        began = time.perf_counter()
        mount_overlay(provisioned.layers, str(task / "upper"), str(task / "work"), str(task / "rootfs"))
        unmount(str(task / "rootfs"))
        overlay.append(time.perf_counter() - began)
        flattened.append(timed(lambda: flatten(provisioned.layers, str(task / "flat"))))
        result["flattened_bytes"] = disk_usage(str(task / "flat"))
        shutil.rmtree(task)
    result["overlay_mount_umount"] = summary(overlay)
    result["flatten"] = summary(flattened)
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1500, help="files of the 'files' image's bottom layer")
    parser.add_argument("--rounds", type=int, default=10, help="task root filesystems made each way")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON result here too")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench/images.py mounts overlays: run it as root")
    doc, started, load = start("images", argv, {"blobs": blob_ids(CODE)})
    doc["parameters"] = {"files": args.files, "rounds": args.rounds}
    work = Path(tempfile.mkdtemp(prefix="mesoslike-bench-images-"))
    registry = Registry(work / "registry")
    try:
        push_image(registry, "library/busybox", "latest", busybox_image())
        push_image(registry, "bench/files", "latest", files_image(args.files))
        store = ImageStore(str(work / "store"), default_registry=registry.host)
        doc["results"] = {}
        for name in ("busybox", "bench/files"):
            log(f"measuring {name}")
            doc["results"][name] = measure(store, name, args.rounds, work / "tasks")
    finally:
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    finish(doc, started, load, args.out, log)


if __name__ == "__main__":
    main()
