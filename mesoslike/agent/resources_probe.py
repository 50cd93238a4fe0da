"""What this machine has: the agent's resources when ``--resources`` is not
given (or leaves a standard kind out), and its default hostname.

As in Mesos: ``cpus`` = the number of CPUs, ``mem`` = total memory in MB,
``disk`` = free space of the work directory in MB, ``ports`` = 31000-32000.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from pathlib import Path

from mesoslike.attributes import AttributesError
from mesoslike.attributes import parse_attributes as typed_attribute_map
from mesoslike.errors import ConfigError
from mesoslike.resources import Resources

__all__ = ["detect_resources", "complete_resources", "detect_hostname", "parse_attributes", "DEFAULT_PORTS",
           "STANDARD_KINDS"]

log = logging.getLogger("mesoslike.agent")

DEFAULT_PORTS = (31000, 32000)
STANDARD_KINDS = ("cpus", "mem", "disk", "ports")
_MEMINFO = Path("/proc/meminfo")


def detect_cpus() -> int:
    return os.cpu_count() or 1


def detect_mem_mb(meminfo: Path = _MEMINFO) -> int:
    """MemTotal of ``/proc/meminfo`` in MB (whole MB, rounded down); falls
    back to sysconf where there is no /proc."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                kilobytes = int(line.split()[1])
                return kilobytes // 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    except (OSError, ValueError):  # pragma: no cover - neither /proc nor sysconf
        log.warning("cannot tell this machine's memory; advertising mem:0")
        return 0


def detect_disk_mb(work_dir: str | os.PathLike) -> int:
    """Free space (for an unprivileged user) of the file system holding ``work_dir``, in MB."""
    return shutil.disk_usage(work_dir).free // (1024 * 1024)


def detect_resources(work_dir: str | os.PathLike) -> Resources:
    """Everything this machine has: cpus, mem, disk (of ``work_dir``) and ports."""
    return Resources({"cpus": detect_cpus(), "mem": detect_mem_mb(), "disk": detect_disk_mb(work_dir)},
                     ranges={"ports": [DEFAULT_PORTS]})


def complete_resources(given: Resources | None, work_dir: str | os.PathLike) -> Resources:
    """``given`` with every standard kind (cpus, mem, disk, ports) it leaves
    out filled in from the machine, as Mesos does; ``None`` = all detected.
    A kind given only reserved (``cpus(analytics):4``) is not left out: as in
    Mesos, no unreserved ``cpus`` is added to it."""
    detected = detect_resources(work_dir)
    if given is None:
        return detected
    missing = [kind for kind in STANDARD_KINDS if kind not in given.stripped().names()]
    return given + detected.only(missing)


def detect_hostname() -> str:
    return socket.gethostname()


def parse_attributes(text: str) -> dict[str, str]:
    """``"rack:r1;level:3;ports:[1000-2000];tags:{a,b}"`` -> the canonical
    map of typed Mesos attributes (:func:`mesoslike.attributes.parse_attributes`);
    raises :class:`ConfigError` naming the bad item (no ``:``, an empty or bad
    name, a value against the grammar such as ``[1000-``)."""
    try:
        return typed_attribute_map(text)
    except AttributesError as exc:
        raise ConfigError(f"--attributes {text!r}: {exc}") from None
