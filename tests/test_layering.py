"""The layers of docs/architecture.rst, checked on the source: the sans-I/O
core imports no I/O, no clock and no global randomness; zmq and kazoo stay at
their edges; frameworks/ uses only the public mesoslike API."""

import ast
import pathlib

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mesoslike"

#: modules of the pure core (layer 1) and the pure wire codec (layer 2)
CORE = ["resources.py", "errors.py", "fairness.py", "allocator", "wire", "master/core.py", "master/records.py",
        "master/state.py", "master/registry.py", "master/inbox.py", "master/roles.py", "master/preemption.py",
        "agent/core.py", "driver/core.py"]
FORBIDDEN_IN_CORE = {"socket", "threading", "asyncio", "zmq", "kazoo", "subprocess", "select", "selectors",
                     "http", "urllib", "os", "time"}


def python_files(*parts):
    for part in parts:
        path = PACKAGE / part
        yield from ([path] if path.is_file() else sorted(path.rglob("*.py")))


def imported_modules(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name.split(".")[0], node
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0], node


def assert_pure(path):
    for module, node in imported_modules(path):
        assert module not in FORBIDDEN_IN_CORE, f"{path.relative_to(ROOT)}:{node.lineno} imports {module}"
    source = path.read_text()
    for call in ("random.random(", "random.shuffle(", "random.choice(", "time.time(", "time.monotonic("):
        assert call not in source, f"{path.relative_to(ROOT)} uses {call} (inject a clock / random.Random)"


def test_core_does_no_io_and_reads_no_clock():
    for path in python_files(*CORE):
        assert_pure(path)


def test_core_imports_only_core():
    # clock.py holds the Clock protocol the core takes; SystemClock, the one
    # reader of real time, lives beside it and is injected from outside
    core_names = {p.split("/")[0].split(".")[0] for p in CORE} | {"clock"}
    for path in python_files(*CORE):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mesoslike."):
                inner = node.module.split(".")[1]
                module = node.module.split(".", 1)[1].replace(".", "/")
                allowed = inner in core_names and (inner not in ("master", "agent", "driver") or module + ".py" in CORE)
                assert allowed, f"{path.relative_to(ROOT)} (core) imports outer layer {node.module}"


def test_zmq_and_kazoo_only_at_their_edges():
    for path in PACKAGE.rglob("*.py"):
        for module, node in imported_modules(path):
            if module == "zmq":
                assert "transport" in path.name, f"{path.relative_to(ROOT)} imports zmq outside the transport"
            if module == "kazoo":
                assert "ha" in path.parts or path.stem in ("ha", "zookeeper"), \
                    f"{path.relative_to(ROOT)} imports kazoo outside the HA module"


def test_frameworks_use_only_the_public_api():
    for path in (ROOT / "frameworks").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mesoslike"):
                for alias in node.names:
                    assert not alias.name.startswith("_"), f"{path.relative_to(ROOT)} imports private {alias.name}"
                assert not any(part.startswith("_") for part in node.module.split(".")), \
                    f"{path.relative_to(ROOT)} imports private module {node.module}"


#: the bundled Fuxi scheduler's pure cores (frameworks/fuxi), driven by its runtimes
FUXI_CORE = ["core.py", "waiting_queue.py", "quota.py", "appmaster_core.py"]


def test_the_fuxi_cores_do_no_io_and_read_no_clock():
    for name in FUXI_CORE:
        assert_pure(ROOT / "frameworks" / "fuxi" / name)
