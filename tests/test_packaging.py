"""The package installs with both ``pip install .`` and ``pip install -e .``:
two import packages, ``mesoslike`` and the bundled frameworks'
``mesoslike_frameworks`` (frameworks/mesoslike_frameworks/), no top-level
``frameworks`` package; the whole command line, the bundled frameworks'
commands found through the entry points; and what its commands read by
default (the dashboards' files, the simulator's bundled trace) as package
data.

The virtualenv the test builds sees nothing of the interpreter that made it
(no ``--system-site-packages``): pip resolves and installs the declared
dependencies as it would on a fresh machine, so a dependency missing from
setup.cfg fails here instead of passing because this machine happens to
have it."""

import configparser
import os
import pathlib
import shutil
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


#: the bundled frameworks' commands (DESIGN.md §3.1, §9), found through the mesoslike.commands entry points
BUNDLED_COMMANDS = ["app", "deployment", "fuxi", "run", "services"]
#: one subcommand of each, whose --help must work in an installed copy
BUNDLED_HELP = [["fuxi", "serve"], ["fuxi", "submit"], ["fuxi", "status"], ["run"], ["services", "serve"],
                ["app", "deploy"], ["deployment", "list"]]


def probed(probe: str) -> list[str]:
    """The lines a fresh interpreter prints running ``probe`` in the checkout."""
    return run([sys.executable, "-c", probe], cwd=ROOT).stdout.splitlines()


def test_the_bundled_frameworks_are_declared_as_entry_points():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    commands = [line.split("=")[0].strip() for line in config["options.entry_points"]["mesoslike.commands"].split("\n")
                if line.strip()]
    assert sorted(commands) == BUNDLED_COMMANDS


def test_a_command_imports_only_what_it_uses():
    # the registry is lazy: `mesoslike run --help` loads the command framework, not the Fuxi scheduler,
    # the service scheduler or the master; and the package's names load on first use, so neither the wire
    # codec nor the driver (zmq) is imported to print a help text
    probe = ("import sys\nfrom mesoslike.cli import main\n"
             "try:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('mesoslike_frameworks.fuxi', "
             "'mesoslike_frameworks.services', 'mesoslike.master', 'mesoslike.sim', 'mesoslike.wire', "
             "'mesoslike.driver', 'zmq', 'msgspec', 'msgpack'))))\n"
             "print('mesoslike_frameworks.command_cli' in sys.modules)")
    out = probed(probe)
    assert out[-2:] == ["[]", "True"], out


def test_the_agent_command_does_not_load_the_master_core():
    # `mesoslike agent` shares its module with `master` and reads the master's records for its
    # options; the master's core, allocator books and runtime are half a second of CPU it never uses
    probe = ("import sys\nfrom mesoslike.cli import main\n"
             "try:\n    main(['agent', '--help'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m in ('mesoslike.master.core', 'mesoslike.master.runtime', "
             "'mesoslike.master.offers', 'mesoslike.allocator.hierarchical')))")
    out = probed(probe)
    assert out[-1] == "[]", out


def test_a_built_in_command_does_not_look_up_plugins():
    # `mesoslike --version` (and master, agent ...) need no entry point: importlib.metadata is not imported
    probe = ("import sys\nfrom mesoslike.cli import main\n"
             "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in sys.modules if m.startswith(('mesoslike.plugins', 'importlib.metadata', "
             "'mesoslike.wire'))))")
    out = probed(probe)
    assert out[-1] == "[]", out


def test_every_package_directory_is_declared():
    declared, _ = declared_packages()
    found = {"mesoslike." + ".".join(p.parent.relative_to(ROOT / "mesoslike").parts)
             for p in (ROOT / "mesoslike").rglob("__init__.py")}
    found = {name.rstrip(".") for name in found}
    found |= {".".join(p.parent.relative_to(ROOT / "frameworks").parts)
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
        "import importlib.util, mesoslike, mesoslike_frameworks as f, mesoslike.allocator, mesoslike.transport;"
        "import msgpack, zmq, kazoo, attrs, click, sortedcontainers;"
        "print(f.__name__);"
        "print(importlib.util.find_spec('frameworks') is None)"
    )
    out = run([str(python), "-c", probe], cwd=tmp_path)
    assert out.stdout.split() == ["mesoslike_frameworks", "True"]
    version = run([str(venv / "bin" / "mesoslike"), "--version"], cwd=tmp_path)
    assert "mesoslike" in version.stdout
    # the whole command line: the bundled frameworks' commands come through the entry points
    listed = run([str(venv / "bin" / "mesoslike"), "--help"], cwd=tmp_path).stdout
    assert all(f"  {name} " in listed for name in BUNDLED_COMMANDS), listed
    for command in BUNDLED_HELP:
        run([str(venv / "bin" / "mesoslike"), *command, "--help"], cwd=tmp_path)
    if not editable:
        site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
        assert not (pathlib.Path(site) / "frameworks").exists()
        assert (pathlib.Path(site) / "mesoslike_frameworks" / "__init__.py").exists()
        assert (pathlib.Path(site) / "mesoslike" / "py.typed").exists()
        # the master's dashboard (docs/dashboard.rst) ships its files
        for installed, source in (("mesoslike/master", ROOT / "mesoslike" / "master"),
                                  ("mesoslike_frameworks/fuxi", ROOT / "frameworks" / "mesoslike_frameworks" / "fuxi")):
            static = pathlib.Path(site) / installed / "static"
            assert {p.name for p in static.iterdir()} == {p.name for p in (source / "static").iterdir()}
        # the namespace init helper's source ships, and the installed agent builds the helper from it
        assert (pathlib.Path(site) / "mesoslike" / "agent" / "nsinit.c").exists()
        built = run([str(python), "-c", "from mesoslike.agent import nsinit; print(nsinit.helper(%r))"
                     % str(tmp_path / "meta")], cwd=tmp_path).stdout.strip()
        if shutil.which(os.environ.get("CC") or "cc") is not None or os.environ.get("CI") == "true":
            assert built.startswith(str(pathlib.Path(site) / "mesoslike" / "agent")) and os.access(built, os.X_OK), built
        # the bundled trace is package data: the installed command replays it from anywhere
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        trace = pathlib.Path(site) / "mesoslike" / "sim" / "data" / "alibaba-openb-2023"
        assert {p.name for p in trace.iterdir()} >= {"openb_node_list_all_node.csv", "openb_pod_list_default.csv"}
        replay = run([str(venv / "bin" / "mesoslike"), "simulate", "--workload", "trace", "--compare", "drf"],
                     cwd=elsewhere)
        assert "8151 tasks launched, 8151 finished" in replay.stdout, replay.stdout[-2000:]
    # a policy the bundled Fuxi scheduler adds to the simulator (mesoslike.simulation_policies)
    fuxi = run([str(venv / "bin" / "mesoslike"), "simulate", "--policy", "fuxi-fifo"], cwd=tmp_path)
    assert "fuxi" in fuxi.stdout


def test_a_framework_does_not_load_the_allocators_policies():
    # a framework's message types import the allocator's offer model (mesoslike.allocator.offers); the
    # package's other names — its sorters and the allocator itself, the master's — load on first use
    probe = ("import sys\nimport mesoslike.driver.driver, mesoslike_frameworks.command\n"
             "print(sorted(m for m in sys.modules if m.startswith('mesoslike.allocator.')))")
    out = probed(probe)
    assert out[-1] == "['mesoslike.allocator.offers']", out


def test_a_framework_does_not_import_attrs():
    # every value type on a framework's path is a msgspec Struct (or a plain class): attrs, ~20 ms of
    # every client's start, is the master's, the agent's and the Fuxi scheduler's alone
    probe = ("import sys\nimport mesoslike.driver.driver, mesoslike_frameworks.command\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('attr', 'attrs')))")
    out = probed(probe)
    assert out[-1] == "[]", out


def test_every_public_name_of_the_allocator_loads_on_first_use():
    import mesoslike.allocator as allocator

    assert set(allocator.__all__) == allocator._LAZY.keys()
    assert all(getattr(allocator, name) is not None for name in allocator.__all__)


def test_the_bundled_sorters_are_registered_on_first_use_and_can_be_overridden():
    probe = ("from mesoslike.allocator import register_sorter, sorter_names, make_sorter, DRFSorter\n"
             "print(sorter_names())\n"
             "class Mine(DRFSorter): pass\n"
             "register_sorter('drf', Mine)\n"
             "print(type(make_sorter('drf')).__name__, sorter_names())")
    out = probed(probe)
    assert out[-2:] == ["['drf', 'random']", "Mine ['drf', 'random']"], out
    # registered before anything loaded the bundled policies: the user's still wins
    probe = ("import sys\nfrom mesoslike.allocator.sorter import register_sorter, make_sorter, sorter_names\n"
             "print('mesoslike.allocator.drf' in sys.modules)\n"
             "register_sorter('drf', lambda hierarchical, rng: 'mine')\n"
             "import mesoslike.allocator.drf\n"   # (its import registers nothing over the user's)
             "print(make_sorter('drf'), sorter_names())")
    out = probed(probe)
    assert out[-2:] == ["False", "mine ['drf', 'random']"], out
