"""The package installs with both ``pip install .`` and ``pip install -e .``,
maps frameworks/ to ``mesoslike.frameworks`` and ships no top-level
``frameworks`` package."""

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


def test_every_package_directory_is_declared():
    declared, _ = declared_packages()
    found = {"mesoslike." + ".".join(p.parent.relative_to(ROOT / "mesoslike").parts)
             for p in (ROOT / "mesoslike").rglob("__init__.py")}
    found = {name.rstrip(".") for name in found}
    found |= {"mesoslike.frameworks" + "".join("." + part for part in p.parent.relative_to(ROOT / "frameworks").parts)
              for p in (ROOT / "frameworks").rglob("__init__.py")}
    assert found == declared


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("editable", [False, True], ids=["install", "editable"])
def test_installs_into_a_fresh_virtualenv(tmp_path, editable):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = venv / "bin" / "python"
    target = ["-e", str(ROOT)] if editable else [str(ROOT)]
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *target],
                   check=True, cwd=tmp_path)
    probe = (
        "import importlib.util, mesoslike, mesoslike.frameworks as f, mesoslike.allocator;"
        "print(f.__name__);"
        "print(importlib.util.find_spec('frameworks') is None)"
    )
    out = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True, cwd=tmp_path)
    assert out.stdout.split() == ["mesoslike.frameworks", "True"]
    version = subprocess.run([str(venv / "bin" / "mesoslike"), "--version"], check=True, capture_output=True,
                             text=True, cwd=tmp_path)
    assert "mesoslike" in version.stdout
    if not editable:
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              check=True, capture_output=True, text=True).stdout.strip()
        assert not (pathlib.Path(site) / "frameworks").exists()
        assert (pathlib.Path(site) / "mesoslike" / "frameworks" / "__init__.py").exists()
