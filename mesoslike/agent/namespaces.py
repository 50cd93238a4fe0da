"""Linux namespaces for a task's container: the system calls (through
``ctypes``: Python 3.11 has no ``os.unshare``/``os.setns``), the mounts a
container gets, and the probe an agent makes at start.

Standard library only: the supervisor (:mod:`.supervisor`, run as ``python
-I -S``) and its launcher load this file by its path.

How a task gets its namespaces (docs/containers.rst, "Isolators") — no
process more than without them, so that the launch stays cheap:

- **PID.** The launcher (or, without one, the agent's thread) calls
  ``unshare(CLONE_NEWPID)`` and forks the task's supervisor, which is so the
  first process — pid 1, the *init* — of a new PID namespace; then it goes
  back to its own (``setns``) for the next fork (:class:`PidNamespaceForker`).
  The task, spawned by the supervisor, is in that namespace; it sees its
  supervisor and its own processes, nothing else. The supervisor, as the
  namespace's init, reaps the task's orphans; when it exits, the kernel
  SIGKILLs whatever is left in the namespace.
- **mount, IPC, UTS, network.** The supervisor unshares them itself
  (:func:`enter`), before it spawns the task: a private mount table whose
  changes do not reach the host (``/`` made a recursive slave: the host's
  later mounts still show), ``/proc`` mounted anew for the PID namespace,
  a fresh ``/dev/shm`` with the IPC namespace, the sandbox's ``tmp`` as
  ``/tmp``, the volumes; a host name of its own; a network namespace with
  only the loopback interface (``network/none``).

Private ``/tmp`` hides the host's ``/tmp`` — where the agent's work
directory often is (``mesoslike agent``'s default) and maybe its Python.
The paths the task must still reach there (``keep``) are bound back at
the same place inside the new ``/tmp`` before it is mounted (a recursive
bind carries them).
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import struct
import sys

__all__ = ["CLONE_NEWNS", "CLONE_NEWUTS", "CLONE_NEWIPC", "CLONE_NEWPID", "CLONE_NEWNET", "NAMESPACES",
           "unshare", "setns", "mount", "umount", "sethostname", "PidNamespaceForker", "enter", "private_tmp",
           "loopback_up", "bind", "host_pid_of_child", "probe", "probe_in_child"]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
#: the namespaces a container may get, by the name launch files use
NAMESPACES = {"pid": CLONE_NEWPID, "mount": CLONE_NEWNS, "ipc": CLONE_NEWIPC, "uts": CLONE_NEWUTS,
              "net": CLONE_NEWNET}

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_SLAVE = 1 << 19
MNT_DETACH = 2

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"   # struct ifreq: the name, then ifr_flags in a 24-byte union

_libc = None


def _lib() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.unshare.argtypes = [ctypes.c_int]
        libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        libc.sethostname.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        _libc = libc
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def unshare(flags: int) -> None:
    """``unshare(2)``; OSError saying which call failed."""
    _check(_lib().unshare(flags), f"unshare({_names(flags)})")


def setns(fd: int, nstype: int) -> None:
    """``setns(2)``."""
    _check(_lib().setns(fd, nstype), f"setns({_names(nstype)})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    """``mount(2)``; OSError naming the target."""
    _check(_lib().mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)),
           f"mount {fstype or source or ''} on {target}")


def umount(target: str) -> None:
    """``umount2(target, MNT_DETACH)``."""
    _check(_lib().umount2(os.fsencode(target), MNT_DETACH), f"umount {target}")


def sethostname(name: str) -> None:
    data = name.encode()
    _check(_lib().sethostname(data, len(data)), "sethostname")


def _names(flags: int) -> str:
    return "|".join(name for name, flag in NAMESPACES.items() if flags & flag) or hex(flags)


# ----------------------------------------------------------------- the fork
class PidNamespaceForker:
    """Starts processes that are each the init of a PID namespace of their
    own, from a thread that stays in its own namespace. Not thread-safe
    per instance (the launcher's loop, or the agent's loop thread)."""

    def __init__(self) -> None:
        self._own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)

    def first_of_new_namespace(self, start):
        """Call ``start`` — which starts one process: ``os.fork``, a
        ``subprocess.Popen`` — so that the process is pid 1 of a new PID
        namespace; returns what ``start`` returned (in both processes, for
        a fork). Raises OSError when the kernel refuses the namespace
        (``start`` was not called then)."""
        me = os.getpid()
        unshare(CLONE_NEWPID)
        try:
            return start()
        finally:
            if os.getpid() == me:   # never in a forked child: its children are to be in its namespace
                setns(self._own, CLONE_NEWPID)

    def close(self) -> None:
        os.close(self._own)


# --------------------------------------------------------- in the container
def enter(namespaces: list[str], *, tmp: str = "", keep: list[str] | tuple[str, ...] = (), hostname: str = "",
          volumes: list[dict] | tuple[dict, ...] = ()) -> None:
    """In the supervisor, single-threaded, before it spawns the task: the
    namespaces of ``namespaces`` other than ``pid`` (which the fork gave),
    then the container's mounts: ``/`` a recursive slave, ``/proc`` anew
    (with ``pid``), ``/dev/shm`` anew (with ``ipc``), ``tmp`` (a directory)
    as ``/tmp`` with ``keep`` still reachable (:func:`private_tmp`), the
    ``volumes`` (``{"source", "target", "readonly", "within", "create"}``,
    bound in order: :func:`bind`);
    ``hostname`` (with ``uts``); the loopback interface up (with ``net``).
    Raises OSError naming what failed."""
    flags = 0
    for name in namespaces:
        if name != "pid":
            flags |= NAMESPACES[name]
    if flags:
        unshare(flags)
    if "mount" in namespaces:
        mount(None, "/", None, MS_REC | MS_SLAVE)
        if "pid" in namespaces:
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        if "ipc" in namespaces:
            mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        if tmp:
            private_tmp(tmp, keep)
        for volume in volumes:
            bind(volume["source"], volume["target"], bool(volume.get("readonly")), str(volume.get("within", "")),
                 str(volume.get("create", "")))
    if "uts" in namespaces and hostname:
        sethostname(hostname)
    if "net" in namespaces:
        loopback_up()


def private_tmp(tmp: str, keep: list[str] | tuple[str, ...] = (), root: str = "/tmp") -> None:
    """Mount directory ``tmp`` (made, mode 1777) on ``root``. Each path of
    ``keep`` (symlinks resolved) below ``root`` is first bound at its place
    inside ``tmp``, so that the recursive bind of ``tmp`` on ``root``
    carries it there: the task finds it at the same path as before."""
    _make_directory(tmp)   # a launch's hot path: a mkdir, not makedirs' walk
    os.chmod(tmp, 0o1777)
    real_root = root if root == "/tmp" and not os.path.islink(root) else os.path.realpath(root)
    for path in _outermost(keep):   # the agent gives them resolved
        relative = os.path.relpath(path, real_root)
        if relative == "." or relative.startswith(".."):
            continue   # not below root: it stays where it is
        target = os.path.join(tmp, relative)
        _make_directory(target)
        mount(path, target, None, MS_BIND)
    mount(tmp, root, None, MS_BIND | MS_REC)


def _make_directory(path: str) -> None:
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(path, exist_ok=True)


def bind(source: str, target: str, readonly: bool = False, within: str = "", create: str = "") -> None:
    """Bind ``source`` on ``target``, read-only if asked. ``within``: a
    directory ``source`` must lie in once every symlink is resolved — it
    is checked on the very file that is mounted (opened, then mounted
    through ``/proc/self/fd``), so that a symlink swapped in meanwhile
    cannot lead elsewhere. ``create``: a directory in which a missing
    ``target`` is made (a directory, or an empty file for a file) — only
    there, once its parent's symlinks are resolved."""
    fd = os.open(source, os.O_PATH | os.O_CLOEXEC)
    try:
        opened = f"/proc/self/fd/{fd}"
        if within:
            _check_within(os.readlink(opened), within, f"volume source {source}")
        if create and not os.path.lexists(target):
            _check_within(os.path.dirname(target), create)
            if os.path.isdir(opened):
                os.makedirs(target, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target) or "/", exist_ok=True)
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        mount(opened, target, None, MS_BIND | MS_REC)
    finally:
        os.close(fd)
    if readonly:   # a bind takes its flags only from a remount
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


def _check_within(path: str, directory: str, what: str = "") -> None:
    real, limit = os.path.realpath(path), os.path.realpath(directory)
    if real != limit and not real.startswith(limit.rstrip("/") + "/"):
        raise OSError(f"{what or path} resolves to {real}, outside {limit}")


def _outermost(paths) -> list[str]:
    """The paths that are not below another of them, each once."""
    kept: list[str] = []
    for path in sorted(set(paths)):
        if not any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(path)
    return kept


def loopback_up() -> None:
    """Bring ``lo`` up in this (new) network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        import fcntl
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


# ------------------------------------------------------------- host pids
def host_pid_of_child(host_proc: int, parent: int, inner: int) -> int | None:
    """The host's pid of the child ``inner`` (a pid of this namespace) of
    ``parent`` (the host's pid of the calling thread), read through the
    host's ``/proc`` (``host_proc``, a directory descriptor opened before
    ``/proc`` was mounted anew). None if it is gone."""
    try:
        children = _read_in(host_proc, f"{parent}/task/{parent}/children").split()
    except OSError:
        return None
    for child in children:
        try:
            status = _read_in(host_proc, f"{int(child)}/status")
            at = status.index(b"\nNSpid:") + 7
            if int(status[at:status.index(b"\n", at)].split()[-1]) == inner:
                return int(child)
        except (OSError, ValueError, IndexError):
            continue
    return None


def _read_in(directory: int, path: str) -> bytes:
    """A small file of ``/proc`` below ``directory`` (a descriptor): one
    ``os.open`` and read, no file object (the shared supervisor reads two
    a task)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC, dir_fd=directory)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


# ----------------------------------------------------------------- probe
def probe_in_child(name: str) -> str:
    """Try namespace ``name`` (and what a container does with it) in a
    forked child; '' if it works, else why not. Call in a single-threaded
    process (``python namespaces.py --probe``)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        problem = ""
        try:
            _try(name)
        except BaseException as exc:  # noqa: BLE001 - reported, whatever it is
            problem = str(exc) or type(exc).__name__
        os.write(write_end, problem.encode()[:1000])
        os._exit(0)
    os.close(write_end)
    chunks = []
    while True:
        chunk = os.read(read_end, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    problem = b"".join(chunks).decode("utf-8", "replace")
    if not problem and status != 0:
        problem = f"the probe ended with wait status {status}"
    return problem


def _try(name: str) -> None:
    if name == "pid":   # pid 1 of a new namespace, and its own /proc
        unshare(CLONE_NEWPID | CLONE_NEWNS)
        mount(None, "/", None, MS_REC | MS_SLAVE)
        child = os.fork()
        if child == 0:
            code = 0
            try:
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
                if os.getpid() != 1:
                    code = 3
            except OSError:
                code = 2
            os._exit(code)
        _, status = os.waitpid(child, 0)
        if status != 0:
            raise OSError(f"the first process of a new PID namespace cannot mount its /proc (wait status {status})")
    elif name == "mount":
        unshare(CLONE_NEWNS)
        mount(None, "/", None, MS_REC | MS_SLAVE)
        mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    elif name == "net":
        unshare(CLONE_NEWNET)
        loopback_up()
    else:
        unshare(NAMESPACES[name])


def probe(names: list[str], python: str | None = None) -> dict[str, str]:
    """Which of the namespaces ``names`` this machine and this process's
    privileges give: name -> '' (it works) or why not. Runs in a process
    of its own (``python -I -S namespaces.py --probe``), so that the
    caller's threads do not matter."""
    import subprocess
    if not names:
        return {}
    try:
        done = subprocess.run([python or sys.executable, "-I", "-S", os.path.abspath(__file__), "--probe",
                               ",".join(names)], capture_output=True, timeout=60, check=False)
        answer = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        return {name: f"the probe could not run: {exc}" for name in names}
    return {name: str(answer.get(name, "not probed")) for name in names}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        print(json.dumps({name: probe_in_child(name) for name in sys.argv[2].split(",") if name in NAMESPACES}))
    else:
        print("usage: namespaces.py --probe pid,mount,ipc,uts,net", file=sys.stderr)
        sys.exit(2)
