import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Deterministic, bounded property tests in CI; a little more locally if asked.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="module")
def _a_zeromq_context_per_test_module():
    """Each test module's in-process endpoints share a ZeroMQ context of
    their own. Three CI runs saw every in-process socket stop answering from
    one moment on: the context's I/O thread blocked sending a monitor event
    (a client's monitor never read, and a client dropped unclosed whose
    monitor's reader went first — both fixed in mesoslike.transport, with
    tests in tests/test_transport.py). Should another such block come, a
    context per module keeps it inside the module that caused it, rather
    than failing every later module's tests. Earlier contexts are kept,
    never terminated (that blocks on a socket a test left open)."""
    from mesoslike import transport

    transport._new_context()
    yield


def _task_cgroups() -> set[str]:
    """Every cgroup below a ``mesoslike*`` directory of each hierarchy (the
    agents' default root, ``mesoslike``, and the tests' own roots)."""
    from mesoslike.agent.isolation import cgroup_mounts

    found: set[str] = set()
    for mount in cgroup_mounts():
        try:
            roots = [entry.path for entry in os.scandir(mount.path)
                     if entry.is_dir() and entry.name.startswith("mesoslike")]
        except OSError:
            continue
        for root in roots:
            for directory, _, _ in os.walk(root):
                if directory != root:
                    found.add(directory)
    return found


def _made_by(directory: str, digests: set[str]) -> bool:
    """Whether a task cgroup is of an agent whose work directory has one of
    ``digests``: its name (or that of its ancestor directly below a
    ``mesoslike*`` root) is the agent's key, ``<hostname>-<digest>``, and
    whatever follows its first dot."""
    parts = Path(directory).parts
    below = next((parts[n + 1] for n, part in enumerate(parts[:-1]) if part.startswith("mesoslike")), "")
    return below.split(".", 1)[0].rsplit("-", 1)[-1] in digests


@pytest.fixture(autouse=True, scope="session")
def _no_task_cgroups_left_behind(tmp_path_factory):
    """Agents the tests kill as a crash would (SIGKILL) cannot release their
    pool of emptied task cgroups, and no later agent on their temporary work
    directory sweeps them (an agent sweeps its own prefix when it restarts):
    every CI run left hundreds below /sys/fs/cgroup/*/mesoslike on the
    machine. At the session's end the empty ones its own agents made — those
    whose key names a work directory below the session's temporary
    directories (:data:`agent_helpers.WORK_DIR_DIGESTS` for those made
    elsewhere) — are removed, deepest first; one with processes stays (rmdir:
    EBUSY). Another agent's empty pooled cgroups (a cluster or a benchmark
    running beside the tests) are its own: removing them failed its next
    launches ("cannot join the cgroup: No such device")."""
    import agent_helpers

    before = _task_cgroups()
    yield
    made = _task_cgroups() - before
    if not made:
        return
    digests = agent_helpers.work_dir_digests(tmp_path_factory.getbasetemp()) | agent_helpers.WORK_DIR_DIGESTS
    for directory in sorted((d for d in made if _made_by(d, digests)), key=len, reverse=True):
        try:
            os.rmdir(directory)
        except OSError:
            pass
