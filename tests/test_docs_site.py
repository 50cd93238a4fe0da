"""The documentation is a site: docs/ builds with Sphinx, warnings as errors
and every cross-reference resolved (the command of ``make docs``); the pages
link each other rather than name each other's paths; README.rst stays plain
reStructuredText (GitHub and PyPI render it); and the pages speak of
features, not of the tracker's issue numbers.

This test is where the site is built in a test run (``make test`` runs it
through pytest; ``make docs`` is the same build for reading, into build/docs).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import docutils.core
import docutils.utils
import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.glob("*.rst"))


def doclinks() -> ModuleType:
    """docs/tools/doclinks.py, the finder (and fixer) of unlinked mentions."""
    spec = importlib.util.spec_from_file_location("doclinks", DOCS / "tools" / "doclinks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doclinks"] = module   # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def make_docs_options() -> list[str]:
    """The options of ``make docs`` (the Makefile's DOCS_BUILD), so that the two builds cannot differ."""
    line = next(line for line in (REPO / "Makefile").read_text().splitlines() if line.startswith("DOCS_BUILD ="))
    words = shlex.split(line.split("=", 1)[1])
    assert words[1:3] == ["-m", "sphinx"], line
    return words[3:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_site_builds_with_warnings_as_errors_and_every_reference_resolved(tmp_path):
    options = make_docs_options()
    assert "-W" in options and "-n" in options
    out = tmp_path / "html"
    built = subprocess.run([sys.executable, "-m", "sphinx", *options, str(DOCS), str(out)],
                           cwd=REPO, capture_output=True, text=True, timeout=540)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-6000:]
    assert built.stderr.strip() == "", built.stderr[-6000:]
    assert {page.stem for page in PAGES} <= {page.stem for page in out.glob("*.html")}
    index = (out / "index.html").read_text()
    # the landing page's table of contents reaches every page
    missing = [page.stem for page in PAGES if page.stem != "index" and f'href="{page.stem}.html"' not in index]
    assert not missing, f"not in docs/index.rst's toctree: {missing}"
    # README's links to pages, included by the getting-started page, are links there
    started = (out / "getting-started.html").read_text()
    assert 'href="reliability.html#reliability-partitions"' in started
    assert "docs/reliability.rst" not in started


def test_no_page_mentions_another_by_an_unlinked_path():
    tool = doclinks()
    unlinked = [f"{m.path.relative_to(REPO)}:{m.line}: {m.text}"
                for path in [*PAGES, REPO / "README.rst"] for m in tool.mentions(path)]
    assert not unlinked, ("link these (python docs/tools/doclinks.py --fix does):\n" + "\n".join(unlinked))
    assert list(tool.readme_problems(REPO / "README.rst")) == []


def test_the_finder_sees_a_mention_in_text_and_none_in_literal_blocks(tmp_path):
    tool = doclinks()
    page = tmp_path / "page.rst"
    page.write_text(
        "Title\n=====\n\nSee ``docs/agent.rst``, \"Users\" and docs/ha.rst.\n\n"
        "- a list item with a block::\n\n    docs/wire.rst in a literal block\n\n"
        "  and after it docs/security.rst again\n\n"
        ".. code-block:: bash\n\n   cat docs/cluster.rst\n\n"
        ".. a comment naming docs/fuxi.rst\n\n"
        ">>> print('docs/roles.rst')\n\n"
        "Linked: :doc:`agent`, :ref:`agent-users`.\n")
    found = [(m.line, m.page, m.title) for m in tool.mentions(page)]
    assert found == [(4, "agent", "Users"), (4, "ha", None), (10, "security", None)]
    readme = tmp_path / "README.rst"
    readme.write_text("See `docs/agent.rst <docs/agent.rst#agent-users>`__, not ``docs/ha.rst``.\n")
    assert [m.page for m in tool.mentions(readme)] == ["ha"]


def test_the_readme_is_plain_restructuredtext():
    """GitHub and PyPI render README.rst with docutils alone: no Sphinx role may be in it."""
    text = (REPO / "README.rst").read_text()
    try:
        docutils.core.publish_doctree(text, settings_overrides={"halt_level": 2, "report_level": 2,
                                                               "warning_stream": False})
    except docutils.utils.SystemMessage as problem:
        pytest.fail(f"README.rst is not plain reStructuredText: {problem}")
    assert "<docs/cluster.rst#cluster-placement-constraints>`__" in text


def test_the_docs_speak_of_features_not_of_issue_numbers():
    pattern = re.compile(r"\bissues?\s+#?\d+|#\d{1,3}\b(?!-)", re.I)
    found = [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}: {match.group(0)}"
             for path in [*PAGES, REPO / "README.rst"] for text in [path.read_text()]
             for match in pattern.finditer(text)]
    assert not found, "say what the feature is, not which issue brought it:\n" + "\n".join(found)
