"""Find, and turn into links, the pages of docs/ that mention another page by its path.

The pages once referred to each other as ````docs/agent.rst```` or
``docs/agent.rst, "Users"``: text a reader of the site cannot follow. On the
site a page is linked with ``:doc:`agent``` and a section with
``:ref:`agent-users```, a label written above the section's heading.
README.rst stays plain reStructuredText (GitHub and PyPI render it, and know
no Sphinx roles): there a page is linked by its path,
```docs/agent.rst <docs/agent.rst>`__`` or, for a section, with the label as
the anchor, ``<docs/agent.rst#agent-users>`` (docs/conf.py turns these into
links on the site).

``python docs/tools/doclinks.py`` lists what is left unlinked (exit 1 if any);
``--fix`` rewrites the pages given (all of docs/ by default): each mention
becomes a ``:doc:`` or ``:ref:``, and a section named by its title gets a
label ``PAGE-TITLE-IN-WORDS`` above its heading if it has none. A section
title that matches no heading is reported and left as it was.
tests/test_docs_site.py runs the check, so a new unlinked mention fails the
tests.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

DOCS = Path(__file__).resolve().parents[1]
REPO = DOCS.parent

#: a mention of a page: ``docs/page.rst`` (as a literal or not), with an
#: optional section after a comma: "Title", *Title* or `Title`_
MENTION = re.compile(
    r"(?P<open>``)?docs/(?P<page>[a-z0-9_-]+)\.rst(?(open)``)"
    r"(?:,(?P<gap>\s+)(?:\"(?P<quoted>[^\"]+?)\"|\*(?P<starred>[^*]+?)\*(?!\*)|`(?P<linked>[^`]+?)`_))?")
#: a hyperlink reference of README.rst: `text <docs/page.rst#label>`__
README_LINK = re.compile(r"`[^`]*?<(?P<uri>[^>`]+)>`__?", re.S)
README_URI = re.compile(r"^docs/(?P<page>[a-z0-9_-]+)\.rst(?:#(?P<label>[a-z0-9_-]+))?$")
#: directives whose content is not parsed as reStructuredText
LITERAL_DIRECTIVES = {"code-block", "code", "sourcecode", "literalinclude", "raw", "math", "doctest", "testcode",
                      "testoutput", "parsed-literal"}
DIRECTIVE = re.compile(r"^(\s*)\.\. ([a-zA-Z0-9:_-]+)::")
COMMENT = re.compile(r"^(\s*)\.\.(?: (?![a-zA-Z0-9:_-]+::|_|\[|\|)|\s*$)")
BULLET = re.compile(r"^(\s*)(?:[-*+] |#\. |\d+\. |\(?[a-z0-9]\) )")
ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:.])\1{2,}\s*$")
PARAGRAPH_TITLE = re.compile(r"^(\*\*?)(?P<title>[^*]+?)[.:]?\1(?:\s|$)")
LABEL = re.compile(r"^\.\. _([^:`]+):\s*$")


@dataclass
class Mention:
    path: Path
    line: int
    text: str
    page: str
    title: str | None


def text_spans(text: str) -> Iterator[tuple[int, int]]:
    """The (start, end) offsets of the parts of ``text`` parsed as inline
    markup: everything but literal blocks, literal directives' content,
    comments and doctest blocks."""
    lines = text.splitlines(keepends=True)
    offsets, position = [], 0
    for line in lines:
        offsets.append(position)
        position += len(line)
    offsets.append(position)

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    def block_end(start: int, base: int) -> int:
        """The first line from ``start`` on indented at most ``base`` (blank lines belong to the block)."""
        i = start
        while i < len(lines) and (not lines[i].strip() or indent(lines[i]) > base):
            i += 1
        while i > start and not lines[i - 1].strip():
            i -= 1
        return i

    i, span_start = 0, 0
    while i < len(lines):
        line = lines[i]
        skip_from = skip_to = None
        directive = DIRECTIVE.match(line)
        if directive and directive[2] in LITERAL_DIRECTIVES:
            skip_from, skip_to = i, block_end(i + 1, indent(line))
        elif COMMENT.match(line):
            skip_from, skip_to = i, block_end(i + 1, indent(line))
        elif line.lstrip().startswith(">>>"):
            skip_to = i
            while skip_to < len(lines) and lines[skip_to].strip():
                skip_to += 1
            skip_from = i
        elif line.rstrip().endswith("::") and not directive:
            # a literal block: indented more than its paragraph's text (a list item's text, not its bullet)
            first = i
            while first > 0 and lines[first - 1].strip() and not ADORNMENT.match(lines[first - 1]):
                first -= 1
            bullet = BULLET.match(lines[first])
            skip_from, skip_to = i + 1, block_end(i + 1, len(bullet.group(0)) if bullet else indent(lines[first]))
        if skip_from is not None and skip_to is not None:
            if offsets[skip_from] > span_start:
                yield span_start, offsets[skip_from]
            span_start = offsets[skip_to]
            i = max(skip_to, i + 1)
        else:
            i += 1
    if span_start < len(text):
        yield span_start, len(text)


def mentions(path: Path) -> Iterator[Mention]:
    text = path.read_text(encoding="utf-8")
    for start, end in text_spans(text):
        part = text[start:end]
        if path.name == "README.rst":
            part = README_LINK.sub(lambda link: " " * len(link.group(0)), part)
        for match in MENTION.finditer(part):
            title = match["quoted"] or match["starred"] or match["linked"]
            yield Mention(path, text.count("\n", 0, start + match.start()) + 1, match.group(0), match["page"],
                          " ".join(title.split()) if title else None)


def readme_problems(readme: Path) -> Iterator[str]:
    """Links of README.rst to a page that does not exist or a label that page does not define."""
    text = readme.read_text(encoding="utf-8")
    for link in README_LINK.finditer(text):
        uri = README_URI.match(link["uri"])
        if uri is None:
            continue
        page = DOCS / f"{uri['page']}.rst"
        line = text.count("\n", 0, link.start()) + 1
        if not page.is_file():
            yield f"{readme.name}:{line}: no page docs/{uri['page']}.rst"
        elif uri["label"] and uri["label"] not in labels_of(page):
            yield f"{readme.name}:{line}: docs/{uri['page']}.rst has no label {uri['label']}"


def labels_of(page: Path) -> set[str]:
    return {match[1] for line in page.read_text(encoding="utf-8").splitlines() if (match := LABEL.match(line))}


# ---------------------------------------------------------------- fixing
def words(title: str) -> str:
    """A title as a label's words: lower case, letters and digits, hyphens between words."""
    return "-".join(re.sub(r"[^a-z0-9 ]+", "", title.lower().replace("-", " ").replace("/", " ")).split())


def normalized(title: str) -> str:
    return " ".join(title.replace("``", "").replace("*", "").replace("`", "").lower().split())


def headings(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(index of the title line, title) of every section heading."""
    for i in range(len(lines) - 1):
        title = lines[i].strip()
        if (title and not ADORNMENT.match(lines[i]) and ADORNMENT.match(lines[i + 1])
                and len(lines[i + 1].strip()) >= len(title) and indent_of(lines[i]) == 0):
            yield i, title


def indent_of(line: str) -> int:
    return len(line) - len(line.lstrip())


def paragraph_headings(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(index, title) of every paragraph opening with an emphasized title: ``**Title.** Text``."""
    for i, line in enumerate(lines):
        if (i == 0 or not lines[i - 1].strip()) and (match := PARAGRAPH_TITLE.match(line)):
            yield i, match["title"]


def label_for(page: str, title: str, pages: dict[str, list[str]]) -> tuple[str, bool] | None:
    """The label of ``page``'s section titled ``title`` (or of its paragraph
    opening with that title), written above it if it had none; and whether a
    link must give the title (a paragraph's label has none)."""
    lines = pages.get(page)
    if lines is None:
        return None
    for i, heading in [*headings(lines), *paragraph_headings(lines)]:
        if normalized(heading) != normalized(title):
            continue
        section = ADORNMENT.match(lines[i + 1]) is not None
        top = i - 1 if section and i > 0 and ADORNMENT.match(lines[i - 1]) else i
        above = top - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        if above >= 0 and (existing := LABEL.match(lines[above])):
            return existing[1], not section
        label = f"{page}-{words(title)}"
        lines[top:top] = [f".. _{label}:", ""]
        return label, not section
    return None


def current(path: Path, pages: dict[str, list[str]]) -> str:
    if path.parent == DOCS and path.stem in pages:
        return "\n".join(pages[path.stem])
    return path.read_text(encoding="utf-8")


def mentions_in(text: str) -> Iterator[re.Match[str]]:
    """The mentions in ``text`` outside literal blocks and outside hyperlinks (README's links)."""
    links = [(link.start(), link.end()) for link in README_LINK.finditer(text)]
    for start, end in text_spans(text):
        for mention in MENTION.finditer(text, start, end):
            if not any(a <= mention.start() < b for a, b in links):
                yield mention


def fix(paths: list[Path]) -> list[str]:
    """Link every mention in ``paths``; return what could not be linked."""
    pages = {path.stem: path.read_text(encoding="utf-8").split("\n") for path in DOCS.glob("*.rst")}
    unresolved = []
    for path in paths:
        # first the labels (written into the pages, this one too), then the links
        for mention in mentions_in(current(path, pages)):
            title = mention["quoted"] or mention["starred"] or mention["linked"]
            if title is not None and mention["page"] in pages:
                if label_for(mention["page"], " ".join(title.split()), pages) is None:
                    unresolved.append(f"{path.name}: no section {title!r} in docs/{mention['page']}.rst")
            elif mention["page"] not in pages:
                unresolved.append(f"{path.name}: no page for {mention.group(0)!r}")
        text = current(path, pages)
        pieces, position = [], 0
        for mention in mentions_in(text):
            title = mention["quoted"] or mention["starred"] or mention["linked"]
            if mention["page"] not in pages:
                continue
            found = None if title is None else label_for(mention["page"], " ".join(title.split()), pages)
            if title is not None and found is None:
                continue
            if path.name == "README.rst":   # plain reStructuredText: the path, the label as its anchor
                anchor = f"#{found[0]}" if found else ""
                words_of_mention = " ".join(mention.group(0).replace("`", "").split())
                link = f"`{words_of_mention} <docs/{mention['page']}.rst{anchor}>`__"
            elif found is None:
                link = f":doc:`{mention['page']}`"
            else:
                label, untitled = found
                link = f":ref:`{' '.join(title.split())} <{label}>`" if untitled else f":ref:`{label}`"
            before = text[position:mention.start()]
            if "\n" in mention.group(0):
                # the mention spanned two lines: the link starts the second, so that no line grows much
                # (with what touches it: a newline would put a space between "(" and the link)
                second = mention.group(0).rsplit("\n", 1)[1]
                before, touching = re.fullmatch(r"(.*?)([^\s]*)", before, re.S).groups()  # type: ignore[union-attr]
                before = before.rstrip(" ")
                link = "\n" + second[:len(second) - len(second.lstrip())] + touching + link
            pieces += [before, link]
            position = mention.end()
        text = "".join(pieces) + text[position:]
        if path.parent == DOCS and path.stem in pages:
            pages[path.stem] = text.split("\n")
        elif pieces:
            path.write_text(text, encoding="utf-8")
    for page, lines in pages.items():
        path = DOCS / f"{page}.rst"
        if path.read_text(encoding="utf-8") != "\n".join(lines):
            path.write_text("\n".join(lines), encoding="utf-8")
    return unresolved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fix", action="store_true", help="turn the mentions into links")
    parser.add_argument("paths", nargs="*", type=Path, help="pages (default: docs/*.rst and README.rst)")
    args = parser.parse_args(argv)
    paths = [path.resolve() for path in args.paths] or [*sorted(DOCS.glob("*.rst")), REPO / "README.rst"]
    if args.fix:
        for problem in fix(paths):
            print(problem)
    left = [mention for path in paths for mention in mentions(path)]
    for mention in left:
        print(f"{mention.path.relative_to(REPO)}:{mention.line}: unlinked {mention.text!r}")
    problems = list(readme_problems(REPO / "README.rst"))
    print(*problems, sep="\n", end="\n" if problems else "")
    return 1 if left or problems else 0


if __name__ == "__main__":
    sys.exit(main())
