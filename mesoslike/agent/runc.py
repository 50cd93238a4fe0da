"""Tasks with a container image, run by ``runc`` (docs/containers.rst,
"Running images"): the OCI bundle's ``config.json`` — the process's
command line, environment and user as Mesos's ``docker/runtime`` isolator
makes them, the namespaces, cgroups and mounts — and the calls to
``runc``. The root filesystem (the image's layers under an ``overlay``
with a writable layer of the task's own) is the image provisioner's
(:mod:`.images.rootfs`).

Standard library only: the task's supervisor (:mod:`.supervisor`) loads
this file by its path. The supervisor is the init of the task's PID
namespace (:mod:`.namespaces`) and the container *joins* that namespace
(``config.json`` names it), so that the container's process is the
supervisor's child, as a command task's is: the supervisor waits for it,
signals its group, reaps its orphans, runs its health checks (``runc
exec``), and, when it exits, the kernel ends whatever is left. ``runc run
--detach`` makes the container (in the task's cgroups: the agent's isolator
made them, ``cgroupsPath`` names them) and starts its process — one run of
``runc`` where ``create`` then ``start`` were two, each ~13 ms of CPU —
and ``runc delete`` removes what ``runc`` made. The overlay is mounted in the
supervisor's own mount namespace: it goes with the supervisor, whatever
happens to the agent.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat

__all__ = ["SANDBOX", "CAPABILITIES", "ImageProblem", "command_line", "environment", "process_user", "oci_config",
           "Runc"]

#: where the task's sandbox is inside the container (Mesos's ``MESOS_SANDBOX``)
SANDBOX = "/mnt/mesos/sandbox"
#: the capabilities of a container's process: Docker's default set (images expect them)
CAPABILITIES = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
                "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
                "CAP_KILL", "CAP_AUDIT_WRITE"]
_MASKED = ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
           "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"]
_READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
_SHELL = "/bin/sh"
_DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageProblem(Exception):
    """What an image says cannot be run (no command at all, a user it does not have)."""


# ------------------------------------------------------- the process
def command_line(config: dict, shell: bool, command: str, arguments: list[str]) -> list[str]:
    """The argv of a task in an image, as Mesos's ``docker/runtime``
    isolator makes it from the image's ``Entrypoint`` and ``Cmd``:

    - ``shell`` (the default): ``/bin/sh -c COMMAND`` (the image's
      entrypoint is not used);
    - not ``shell``, with a ``command`` (Mesos's ``value``): that program,
      with ``arguments`` (``arguments[0]`` its name) or none;
    - not ``shell``, no ``command``: the image's ``Entrypoint`` followed by
      ``arguments`` if any (as ``docker run IMAGE ARGS``), else by its
      ``Cmd``; without an ``Entrypoint``, ``arguments`` alone if any, else
      the ``Cmd``."""
    if shell:
        return [_SHELL, "-c", command]
    if command:
        return [command, *arguments[1:]] if arguments else [command]
    entrypoint = [str(a) for a in config.get("Entrypoint") or []]
    cmd = [str(a) for a in config.get("Cmd") or []]
    argv = entrypoint + (list(arguments) if arguments else cmd)
    if not argv:
        raise ImageProblem("it has neither an entrypoint nor a cmd, and the task gives no command")
    return argv


def environment(config: dict, task_env: dict) -> list[str]:
    """The image's ``Env`` overlaid with the task's (the task's win), as
    ``KEY=VALUE`` lines; ``PATH`` is the image's unless the task sets it."""
    merged: dict[str, str] = {}
    for line in config.get("Env") or [_DEFAULT_PATH]:
        key, sep, value = str(line).partition("=")
        if sep and key:
            merged[key] = value
    merged.update(task_env)
    merged.setdefault("PATH", _DEFAULT_PATH.partition("=")[2])
    return [f"{key}={value}" for key, value in merged.items()]


def process_user(rootfs: str, image_user: str, task_user: tuple[int, int, list[int]] | None
                 ) -> tuple[int, int, list[int]]:
    """(uid, gid, additional gids) of the container's process: the task's
    user when the agent switches users (``--switch-user``: the host's ids,
    the sandbox is theirs), else the image's ``User`` (``name``, ``uid``,
    ``name:group``, ``uid:gid``; names looked up in the image's
    ``/etc/passwd`` and ``/etc/group``), else root."""
    if task_user is not None:
        return task_user
    if not image_user:
        return 0, 0, []
    name, _, group = image_user.partition(":")
    passwd = _table(rootfs, "/etc/passwd")
    if name.isdigit():
        uid = int(name)
        gid = next((int(row[3]) for row in passwd if len(row) > 3 and row[2] == name and row[3].isdigit()), 0)
    else:
        row = next((row for row in passwd if row and row[0] == name and len(row) > 3), None)
        if row is None or not row[2].isdigit() or not row[3].isdigit():
            raise ImageProblem(f"its user {name!r} is not in its /etc/passwd")
        uid, gid = int(row[2]), int(row[3])
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            found = next((row for row in _table(rootfs, "/etc/group") if row and row[0] == group and len(row) > 2),
                         None)
            if found is None or not found[2].isdigit():
                raise ImageProblem(f"its group {group!r} is not in its /etc/group")
            gid = int(found[2])
    return uid, gid, []


def _table(rootfs: str, path: str) -> list[list[str]]:
    """The rows of a colon-separated file of the image (read without
    following a symlink out of the root filesystem: none is followed)."""
    full = os.path.join(rootfs, path.lstrip("/"))
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        data = os.read(fd, 1 << 20).decode("utf-8", "replace")
    finally:
        os.close(fd)
    return [line.split(":") for line in data.splitlines() if line and not line.startswith("#")]


# --------------------------------------------------------- the bundle
def oci_config(*, argv: list[str], env: list[str], cwd: str, user: tuple[int, int, list[int]], hostname: str,
               pid_namespace: str, network: str, cgroups_path: str, sandbox: str, tmp: str,
               mounts: list[dict], host_files: bool = True) -> dict:
    """``config.json`` of the task's bundle (OCI runtime spec 1.0): its
    process, the namespaces — PID joined (``pid_namespace``, a path), IPC,
    UTS and mount new, network new only for ``network`` ``"none"`` — its
    cgroups (``cgroupsPath``, made by the agent's isolator), the standard
    mounts, the sandbox at :data:`SANDBOX`, ``tmp`` on ``/tmp``, the
    host's ``/etc/resolv.conf`` and ``/etc/hosts`` (read-only, with the
    host's network) and the volumes (``mounts``: ``{"source",
    "destination", "readonly"}``)."""
    uid, gid, groups = user
    standard = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]},
        _bind(sandbox, SANDBOX, False),
        _bind(tmp, "/tmp", False),
    ]
    if host_files and network == "host":
        standard += [_bind(path, path, True) for path in ("/etc/resolv.conf", "/etc/hosts") if os.path.isfile(path)]
    namespaces = [{"type": "pid", "path": pid_namespace}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}]
    if network == "none":
        namespaces.append({"type": "network"})
    capabilities = CAPABILITIES if uid == 0 else []
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": uid, "gid": gid, **({"additionalGids": groups} if groups else {})},
            "args": argv, "env": env, "cwd": cwd,
            "capabilities": {kind: capabilities for kind in ("bounding", "effective", "permitted")},
            # a process of another user than root may not gain privileges (setuid programs of the image)
            "noNewPrivileges": uid != 0,
        },
        "root": {"path": "rootfs", "readonly": False},
        "hostname": hostname,
        "mounts": standard + [_bind(m["source"], m["destination"], bool(m.get("readonly"))) for m in mounts],
        "linux": {
            "namespaces": namespaces,
            "cgroupsPath": cgroups_path,
            "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            "maskedPaths": _MASKED,
            "readonlyPaths": _READONLY,
        },
    }


def _bind(source: str, destination: str, readonly: bool) -> dict:
    options = ["rbind", "nosuid", "nodev"] + (["ro"] if readonly else ["rw"])
    return {"destination": destination, "type": "bind", "source": source, "options": options}


# ----------------------------------------------------------- the runtime
class Runc:
    """One container's calls to ``runc`` (``binary``), its state kept in
    ``root`` under ``container_id``."""

    def __init__(self, binary: str, root: str, container_id: str) -> None:
        self.binary, self.root, self.id = binary, root, container_id

    def argv(self, *words: str) -> list[str]:
        return [self.binary, "--root", self.root, *words]

    def run(self, bundle: str, stdout: int, stderr: int, env: dict) -> int:
        """``runc run --detach``: the container made and its process
        started; the process's pid (in the caller's PID namespace, which
        the container joined: once ``runc`` has exited the process is the
        caller's child). Its stdout and stderr are the container's (runc
        passes them on). Raises OSError saying what runc said; what it may
        have made is for :meth:`delete`."""
        pid_file = os.path.join(bundle, "container.pid")
        log = os.path.join(bundle, "runc.log")
        self._run(self.argv("--log", log, "--log-format", "json", "run", "--detach", "--bundle", bundle,
                            "--pid-file", pid_file, self.id),
                  env, stdout, stderr, log, "run")
        with open(pid_file) as source:
            return int(source.read().strip())

    def exec_prefix(self, process_file: str = "") -> list[str]:
        """What a health check's command runs through: ``runc exec`` into
        the container (its namespaces, root filesystem, cgroups and user).
        With ``process_file`` (an OCI ``process``: its arguments, environment,
        user) runc runs that process and reads no arguments after the
        container's id: the file holds the check's command line itself."""
        if process_file:
            return self.argv("exec", "--process", process_file, self.id)
        return self.argv("exec", self.id)

    def delete(self, env: dict) -> None:
        """``runc delete --force``: the container's state and cgroups (its
        processes are gone by now); never raises."""
        try:
            pid = os.posix_spawn(self.binary, self.argv("delete", "--force", self.id), env,
                                 file_actions=_quiet_stdio())
            os.waitpid(pid, 0)
        except OSError:
            pass

    def _run(self, argv: list[str], env: dict, stdout: int, stderr: int, log: str, what: str) -> None:
        actions: list[tuple] = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
        for fd, target in ((stdout, 1), (stderr, 2)):
            actions.append((os.POSIX_SPAWN_DUP2, fd, target) if fd >= 0
                           else (os.POSIX_SPAWN_OPEN, target, os.devnull, os.O_WRONLY, 0))
        pid = os.posix_spawn(self.binary, argv, env, file_actions=actions, setsigdef=(signal.SIGTERM,),
                             setsigmask=())
        _, status = os.waitpid(pid, 0)
        if status != 0:
            raise OSError(f"runc {what} failed ({_how(status)}): {_last_error(log)}")


def _quiet_stdio() -> list:
    return [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _last_error(log: str) -> str:
    """The last message of runc's log (JSON lines), or its end."""
    try:
        with open(log, "rb") as source:
            lines = source.read()[-8192:].decode("utf-8", "replace").splitlines()
    except OSError:
        return "(no log)"
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("msg"):
            return str(entry["msg"])[:1000]
    return shlex.quote(lines[-1][:1000]) if lines else "(empty log)"
