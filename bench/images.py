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

With ``--launches N``, also the launch rate of tasks with an image through
real agents (``bench/throughput.py``'s cluster: a master and ``--agents``
agents, their ``--docker-registry`` the local one): each round runs N tasks
``true`` without an image and N in ``busybox`` (its ``/bin/true``), rounds
interleaved on the same cluster; tasks/s and CPU ms a task of the master,
the agents and what runs under them (supervisors, ``runc``, tasks). A task
with an image has a Python supervisor of its own (the shared supervisor
runs none of them: docs/containers.rst), the init of its PID namespace,
which makes its overlay root filesystem and runs ``runc``.
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


def measure_launches(registry: Registry, launches: int, rounds: int, agents: int, work: Path) -> dict:
    """Tasks/s and CPU a task of ``launches`` tasks ``true`` with and
    without an image, rounds interleaved on one cluster."""
    import throughput
    from mesoslike.wire.types import ContainerInfo, Image as TaskImage

    procs = throughput.Processes(work)
    kinds = {"plain": None, "image": ContainerInfo(image=TaskImage("busybox"))}
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpus: dict[str, list[dict]] = {kind: [] for kind in kinds}
    loads: list[list[float]] = []
    try:
        cluster = throughput.Cluster(procs, agents, "cpus:64;mem:65536", ("--docker-registry", registry.host))
        for number in range(rounds):
            loads.append([round(x, 2) for x in os.getloadavg()])
            for kind in (("image", "plain") if number % 2 == 0 else ("plain", "image")):
                before = cluster.cpu()
                result = throughput.run_frameworks(cluster.address, launches, 1, "cpus:0.1;mem:32",
                                                   container=kinds[kind])
                cpu = throughput.cpu_delta(before, cluster.cpu())
                cpu["framework"] = result["framework_cpu_s"]
                rates[kind].append(launches / result["seconds"])
                cpus[kind].append(cpu)
                log(f"launch round {number + 1} {kind}: {rates[kind][-1]:.1f} tasks/s, cpu {cpu}, "
                    f"failed {result['failed']}, load {loads[-1]}")
                if result["failed"]:
                    raise SystemExit(f"{result['failed']} {kind} tasks failed: see {work}/*.log")
    finally:
        procs.close()
    return {"tasks": launches, "agents": agents, "loadavg_per_round": loads,
            "tasks_per_s": {kind: throughput.spread(values) for kind, values in rates.items()},
            "image_to_plain_percent": throughput.spread([100 * a / b for a, b in zip(rates["image"],
                                                                                    rates["plain"])]),
            "cpu_ms_per_task": {kind: {key: throughput.spread([1000 * cpu[key] / launches for cpu in values])
                                       for key in values[0]} for kind, values in cpus.items()}}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1500, help="files of the 'files' image's bottom layer")
    parser.add_argument("--rounds", type=int, default=10, help="task root filesystems made each way")
    parser.add_argument("--launches", type=int, default=0, metavar="N",
                        help="also launch N tasks with and N without an image through real agents, each round")
    parser.add_argument("--launch-rounds", type=int, default=3)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--only-launches", action="store_true", help="no provisioning measurement")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON result here too")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        sys.exit("bench/images.py mounts overlays: run it as root")
    doc, started, load = start("images", argv, {"blobs": blob_ids(CODE)})
    doc["parameters"] = {"files": args.files, "rounds": args.rounds, "launches": args.launches,
                         "launch_rounds": args.launch_rounds, "agents": args.agents}
    work = Path(tempfile.mkdtemp(prefix="mesoslike-bench-images-"))
    registry = Registry(work / "registry")
    try:
        push_image(registry, "library/busybox", "latest", busybox_image())
        push_image(registry, "bench/files", "latest", files_image(args.files))
        store = ImageStore(str(work / "store"), default_registry=registry.host)
        doc["results"] = {}
        for name in () if args.only_launches else ("busybox", "bench/files"):
            log(f"measuring {name}")
            doc["results"][name] = measure(store, name, args.rounds, work / "tasks")
        if args.launches:
            (work / "cluster").mkdir()
            doc["launches"] = measure_launches(registry, args.launches, args.launch_rounds, args.agents,
                                               work / "cluster")
    finally:
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    finish(doc, started, load, args.out, log)


if __name__ == "__main__":
    main()
