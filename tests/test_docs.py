"""The documentation holds together: relative links and anchors resolve, each doc says whom it is for.

GitHub renders these files, so anchors follow its heading slugs: lower case, punctuation other than
hyphens and underscores dropped, spaces to hyphens, and a repeated heading gets ``-1``, ``-2``, ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
CHECKED = [README, *DOCS, ROOT / "tools" / "servicebus_emulator" / "README.md"]
README_MAX_LINES = 300
AUDIENCES = {"architecture.md", "operating.md", "deploying.md", "performance.md", "local-stack.md"}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target), the text possibly spanning lines; an optional "title" is ignored.
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)  # http:, https:, mailto:, ...


def prose(text: str) -> str:
    """The text with fenced code blocks blanked out (line count kept), so their contents are not read."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (inline code, emphasis and link targets reduced to text)."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text, with GitHub's suffixes for repeated headings."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(text).split("\n"):
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(source: Path, text: str, read: Callable[[Path], str | None]) -> list[str]:
    """What is wrong with each relative link of ``text`` (a file at ``source``), read through ``read``."""
    problems = []
    for match in LINK.finditer(prose(text)):
        target = match.group(1)
        if not target or EXTERNAL.match(target):
            continue
        path_part, _, anchor = target.partition("#")
        file = (source.parent / unquote(path_part)).resolve() if path_part else source
        where = f"{source.name}: {target}"
        content = read(file)
        if content is None:
            problems.append(f"{where}: no file {file}")
        elif anchor and file.suffix == ".md" and unquote(anchor) not in anchors(content):
            problems.append(f"{where}: no heading #{anchor} in {file.name}")
    return problems


def read_disk(path: Path) -> str | None:
    """A file's text if it is Markdown, "" for any other file or a folder, None if nothing is there."""
    if not path.exists():
        return None
    return path.read_text(encoding="utf-8") if path.is_file() and path.suffix == ".md" else ""


def links_of(files: Iterable[Path]) -> list[str]:
    return [p for f in files for p in broken_links(f, f.read_text(encoding="utf-8"), read_disk)]


# ---- the checks --------------------------------------------------------------------------------------
def test_the_documents_exist() -> None:
    assert {p.name for p in DOCS} >= AUDIENCES
    assert all(p.is_file() for p in CHECKED)


@pytest.mark.parametrize("doc", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc: Path) -> None:
    assert links_of([doc]) == []


def test_the_readme_fits_one_sitting() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move depth to docs/"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_each_doc_says_whom_it_is_for(doc: Path) -> None:
    blocks = [b.strip() for b in doc.read_text(encoding="utf-8").split("\n\n") if b.strip()]
    assert blocks[0].startswith("# ") and "\n" not in blocks[0], "a doc starts with its title"
    assert blocks[1].startswith("For "), "the first paragraph says whom the doc is for: 'For ...'"


def flowchart(text: str) -> str | None:
    found = re.search(r"```mermaid\n(flowchart .*?)\n```", text, re.DOTALL)
    return found.group(1) if found else None


def test_the_readme_and_the_architecture_show_the_same_flowchart() -> None:
    readme = flowchart(README.read_text(encoding="utf-8"))
    assert readme is not None, "the README has no architecture diagram"
    assert readme == flowchart((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))


# ---- the checker itself --------------------------------------------------------------------------------
def test_slugs_follow_github() -> None:
    assert slug("Why it is correct under at-least-once delivery and crashes") == (
        "why-it-is-correct-under-at-least-once-delivery-and-crashes"
    )
    assert slug("Checks of the deployment (no Azure needed)") == "checks-of-the-deployment-no-azure-needed"
    assert slug("What gets created, and what it costs") == "what-gets-created-and-what-it-costs"
    assert slug("`host.json` and `maxConcurrentCalls`") == "hostjson-and-maxconcurrentcalls"
    assert anchors("# A\n## Notes\n### Notes\n## Notes\n") == {"a", "notes", "notes-1", "notes-2"}


def test_the_checker_reports_broken_links_and_anchors() -> None:
    files = {
        Path("/d/guide.md"): "# Guide\n\n## Set up\n\n## Set up\n",
        Path("/d/img.png"): "",
    }
    page = "\n".join(
        [
            "# Page",
            "[fine](guide.md#set-up) [second](guide.md#set-up-1) [image](img.png) [self](#page)",
            "[web](https://example.com/x#y) [mail](mailto:ops@example.com)",
            "[missing file](nowhere.md) [missing anchor](guide.md#tear-down)",
            "![missing image](gone.png) [missing here](#nothing) [split",
            "text](guide.md#set-up-2)",
            "```",
            "[in code](ignored.md)",
            "```",
        ]
    )
    problems = broken_links(
        Path("/d/page.md"), page, lambda p: files.get(p, page if p.name == "page.md" else None)
    )
    assert problems == [
        "page.md: nowhere.md: no file /d/nowhere.md",
        "page.md: guide.md#tear-down: no heading #tear-down in guide.md",
        "page.md: gone.png: no file /d/gone.png",
        "page.md: #nothing: no heading #nothing in page.md",
        "page.md: guide.md#set-up-2: no heading #set-up-2 in guide.md",
    ]
