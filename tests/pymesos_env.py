"""pymesos from PyPI, unmodified, in a virtualenv of its own (the tests run
its programs as subprocesses against a real cluster).

pymesos 0.3.15 needs ``http-parser``, whose 0.9.0 C extension does not build
on Python 3.11 from its pre-generated C; its pure-Python parser works
(``http_parser.http`` falls back to ``pyparser`` without the extension). So
http-parser's own setup.py is run as it runs on PyPy, where it builds no
extension — a pure wheel, nothing of it patched — and pymesos is installed
as it is. Made once under ``build/pymesos-venv`` (a test's setup: the first
run needs PyPI), reused while it imports.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "build" / "pymesos-venv"
#: what is installed, pinned
PYMESOS = "pymesos==0.3.15"
HTTP_PARSER = "http-parser==0.9.0"
#: pymesos's other dependencies (kazoo: its zk:// master detector)
OTHERS = ["six==1.16.0", "addict==2.4.0", "kazoo==2.11.0"]
#: how http-parser's setup.py is run: as on PyPy (``IS_PYPY``), which builds no C extension
_PURE_SETUP = """
import sys
sys.pypy_version_info = (7, 3, 0)
sys.argv = ["setup.py", "-q", "bdist_wheel", "-d", sys.argv[1]]
exec(compile(open("setup.py").read(), "setup.py", "exec"), {"__name__": "__main__", "__file__": "setup.py"})
"""


def python() -> Path:
    return VENV / "bin" / "python"


def _works() -> bool:
    if not python().exists():
        return False
    check = subprocess.run([str(python()), "-c", "import pymesos, http_parser.http, addict, kazoo; "
                                                "assert pymesos.__VERSION__ == '0.3.15'"],
                           capture_output=True, timeout=60)
    return check.returncode == 0


def _run(*command: str, cwd: str | None = None) -> None:
    done = subprocess.run(list(command), cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")


def ensure() -> Path:
    """The Python of a virtualenv where ``import pymesos`` works (made if needed)."""
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.parent / "pymesos-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # one installer at a time
        if _works():
            return python()
        _run(sys.executable, "-m", "venv", "--clear", str(VENV))
        pip = [str(python()), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        _run(*pip, *OTHERS, "setuptools", "wheel")
        with tempfile.TemporaryDirectory() as work:
            _run(*pip[:3], "download", "--quiet", "--no-deps", "--no-binary", ":all:", HTTP_PARSER, "-d", work)
            (archive,) = Path(work).glob("http-parser-*.tar.gz")
            with tarfile.open(archive) as sdist:
                # the data filter where this Python has it (3.11.4+: Debian 12 has 3.11.2)
                sdist.extractall(work, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            source = next(p for p in Path(work).iterdir() if p.is_dir())
            _run(str(python()), "-c", _PURE_SETUP, os.path.join(work, "wheels"), cwd=str(source))
            (wheel,) = Path(work, "wheels").glob("http_parser-*.whl")
            _run(*pip, "--no-deps", str(wheel), PYMESOS)
        if not _works():
            raise RuntimeError(f"pymesos does not import in {VENV} after installing it")
        return python()
