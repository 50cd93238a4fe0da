"""The package installs with both ``pip install .`` and ``pip install -e .``,
maps frameworks/ to ``mesoslike.frameworks``, ships no top-level
``frameworks`` package, and carries what its commands read by default (the
dashboards' files, the simulator's bundled trace) as package data.

The virtualenv the test builds sees nothing of the interpreter that made it
(no ``--system-site-packages``): pip resolves and installs the declared
dependencies as it would on a fresh machine, so a dependency missing from
setup.cfg fails here instead of passing because this machine happens to
have it."""

import configparser
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def declared_packages():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options"]["packages"].split()), config["options"]["package_dir"]


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run a command; on failure the assertion shows its stdout and stderr."""
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, (
        f"{' '.join(map(str, args))} exited {done.returncode}\n"
        f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}")
    return done


def test_every_package_directory_is_declared():
    declared, _ = declared_packages()
    found = {"mesoslike." + ".".join(p.parent.relative_to(ROOT / "mesoslike").parts)
             for p in (ROOT / "mesoslike").rglob("__init__.py")}
    found = {name.rstrip(".") for name in found}
    found |= {"mesoslike.frameworks" + "".join("." + part for part in p.parent.relative_to(ROOT / "frameworks").parts)
              for p in (ROOT / "frameworks").rglob("__init__.py")}
    assert found == declared


def test_the_run_helper_shows_the_failing_commands_stderr():
    with pytest.raises(AssertionError, match=r"(?s)exited 3.*--- stderr ---\s*boom"):
        run([sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"])


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_installs_into_a_fresh_virtualenv(tmp_path, editable):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    # the venv starts with the standard library only
    bare = subprocess.run([str(python), "-c", "import msgpack"], capture_output=True)
    assert bare.returncode != 0, "the fresh venv must not see the packages of the interpreter that made it"
    target = ["-e", str(ROOT)] if editable else [str(ROOT)]
    run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *target], cwd=tmp_path)
    probe = (
        "import importlib.util, mesoslike, mesoslike.frameworks as f, mesoslike.allocator, mesoslike.transport;"
        "import msgpack, zmq, kazoo, attrs, click, sortedcontainers;"
        "print(f.__name__);"
        "print(importlib.util.find_spec('frameworks') is None)"
    )
    out = run([str(python), "-c", probe], cwd=tmp_path)
    assert out.stdout.split() == ["mesoslike.frameworks", "True"]
    version = run([str(venv / "bin" / "mesoslike"), "--version"], cwd=tmp_path)
    assert "mesoslike" in version.stdout
    if not editable:
        site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
        assert not (pathlib.Path(site) / "frameworks").exists()
        assert (pathlib.Path(site) / "mesoslike" / "frameworks" / "__init__.py").exists()
        assert (pathlib.Path(site) / "mesoslike" / "py.typed").exists()
        # the master's dashboard (docs/dashboard.rst) ships its files
        for installed, source in (("master", ROOT / "mesoslike" / "master"), ("frameworks/fuxi", ROOT / "frameworks" / "fuxi")):
            static = pathlib.Path(site) / "mesoslike" / installed / "static"
            assert {p.name for p in static.iterdir()} == {p.name for p in (source / "static").iterdir()}
        # the bundled trace is package data: the installed command replays it from anywhere
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        trace = pathlib.Path(site) / "mesoslike" / "sim" / "data" / "alibaba-openb-2023"
        assert {p.name for p in trace.iterdir()} >= {"openb_node_list_all_node.csv", "openb_pod_list_default.csv"}
        replay = run([str(venv / "bin" / "mesoslike"), "simulate", "--workload", "trace", "--compare", "drf"],
                     cwd=elsewhere)
        assert "8151 tasks launched, 8151 finished" in replay.stdout, replay.stdout[-2000:]
