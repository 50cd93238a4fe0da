"""docs/architecture.rst names every module of the package, so the map of
the house cannot silently fall behind the code."""

import pathlib

import pytest

pytestmark = pytest.mark.timeout(30)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def module_names() -> list[str]:
    names = []
    for base, prefix in ((ROOT / "mesoslike", "mesoslike"), (ROOT / "frameworks" / "mesoslike_frameworks", "mesoslike_frameworks")):
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if parts[-1] in ("__init__", "__main__") or (prefix == "mesoslike" and parts[0] == "cli"):
                continue
            names.append(".".join(parts))
    return names


def test_every_module_is_on_the_map():
    doc = (ROOT / "docs" / "architecture.rst").read_text()
    missing = [name for name in module_names() if name.split(".")[-1] not in doc]
    assert not missing, f"docs/architecture.rst does not mention: {missing}"
