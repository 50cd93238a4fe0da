"""Sphinx configuration of the documentation site.

Build it with ``make docs`` (into ``build/docs``); ``tests/test_docs_site.py``
builds it the same way, warnings as errors and nitpicky, so a broken link, an
unknown label or a page left out of the table of contents fails the tests.
"""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx

import mesoslike

project = "mesoslike"
author = "the mesoslike authors"
copyright = "the mesoslike authors; Apache-2.0"
release = version = mesoslike.__version__

# No extensions: the pages are hand-written (tests check them against the
# code, see tests/test_framework_api_doc.py), so there is nothing to generate.
extensions: list[str] = []

root_doc = "index"
exclude_patterns = ["tools"]
# every cross-reference must resolve (:doc:, :ref:, :class:, :mod: alike)
nitpicky = True
# literal blocks are shell sessions, output and TOML as often as Python
highlight_language = "none"

# Furo: a maintained theme published as a pure-Python wheel, with a sidebar
# holding the whole table of contents, a table of contents of each page beside
# it and client-side search; it needs nothing but Sphinx and PyPI packages.
html_theme = "furo"
html_title = f"mesoslike {release}"
html_static_path: list[str] = []
html_show_sourcelink = True

# README.rst (included by getting-started.rst) is plain reStructuredText, for
# GitHub and PyPI: it links the pages by their paths, ``docs/PAGE.rst`` or
# ``docs/PAGE.rst#LABEL``; on the site these links go to the page or label,
# and a link that reads as the path reads as the page's or section's title.
_REPOSITORY_LINK = re.compile(r"^docs/(?P<page>[a-z0-9_-]+)\.rst(?:#(?P<label>[a-z0-9_-]+))?$")


def _link_repository_paths(app: Sphinx, doctree: nodes.document) -> None:
    docname = app.env.docname
    for reference in list(doctree.findall(nodes.reference)):
        match = _REPOSITORY_LINK.match(reference.get("refuri", ""))
        if match is None:
            continue
        label, text = match["label"], reference.astext()
        xref = addnodes.pending_xref(
            "", refdomain="std", reftype="ref" if label else "doc",
            reftarget=label if label else "/" + match["page"],
            refexplicit=not text.startswith(f"docs/{match['page']}.rst"), refwarn=True, refdoc=docname)
        xref += nodes.inline("", text, classes=["xref", "std"])
        reference.replace_self(xref)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("doctree-read", _link_repository_paths)
    return {"parallel_read_safe": True}
