"""The manual's fenced blocks, and the marks that say how the tests run them.

A block is a fenced code block of a page under `docs/`. An HTML comment on the line just before
its fence may mark it (the rendered page does not show it):

    <!-- docs-test: skip REASON -->         not run (a fragment, an install, the test suite itself)
    <!-- docs-test: parse-only REASON -->   each command is parsed and checked, not run

A fence may name a file, as Material for MkDocs shows it: ```yaml title="my.yaml"```: the
block is then written to that path (relative to the page's working folder) before the page's
later blocks run. The reason is required: it is what a reader of the page is told.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

DOCS = Path(__file__).resolve().parents[2] / "docs"
Mode = Literal["run", "skip", "parse-only"]
MODES: tuple[Mode, ...] = ("run", "skip", "parse-only")

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)(?P<info>.*)$")
_MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<mode>\S+)\s*(?P<reason>.*?)\s*-->\s*$")
_TITLE = re.compile(r'title="(?P<title>[^"]+)"')


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its file name, its mark and its text."""

    page: str  # path under docs/, e.g. "extending/loss.md"
    line: int  # 1-based line of the opening fence
    lang: str  # "bash", "python", "yaml", "text", ... ("" when none)
    title: str  # the file it is, from title="..." ("" when none)
    mode: str  # one of MODES when the page is right; checked by the tests
    reason: str  # why it is skipped or only parsed ("" when run)
    text: str

    @property
    def where(self) -> str:
        return f"docs/{self.page}:{self.line}"


def pages() -> list[str]:
    """Every Markdown page of the manual, as paths under docs/."""
    return sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def blocks(page: str) -> list[Block]:
    """The fenced blocks of `page` in order, with their marks."""
    lines = (DOCS / page).read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening or opening["info"].strip().startswith("`"):
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        info = opening["info"].strip()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        mark = _MARK.match(lines[i - 1]) if i > 0 else None
        title = _TITLE.search(info)
        found.append(
            Block(
                page=page,
                line=i + 1,
                lang=info.split()[0].lower() if info else "",
                title=title["title"] if title else "",
                mode=mark["mode"] if mark else "run",
                reason=mark["reason"] if mark else "",
                text=body + "\n",
            )
        )
        i = end + 1
    return found
