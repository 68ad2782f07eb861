# SPDX-License-Identifier: Apache-2.0
"""Every relative link in the README and docs/ resolves: the file exists, and an anchor names a heading
of that file (as GitHub makes anchors of headings)."""

from __future__ import annotations

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(path: str, code: bool = False) -> str:
    """The page without its fenced code blocks, and without inline code unless ``code`` (a link there is
    an example, not a link; a heading keeps its code's text)."""
    kept, fenced = [], False
    with open(path, encoding="utf-8") as file:
        for line in file:
            if FENCE.match(line.strip()):
                fenced = not fenced
                continue
            if not fenced:
                kept.append(line if code else re.sub(r"`[^`]*`", "", line))
    return "".join(kept)


def anchors(path: str) -> set:
    """The anchors GitHub gives the headings of ``path``: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered."""
    found, seen = set(), {}
    for line in prose(path, code=True).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def relative_links(path: str) -> list:
    return [target for target in LINK.findall(prose(path)) if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]


def test_the_pages_have_links():
    assert len(PAGES) > 5 and sum(len(relative_links(page)) for page in PAGES) > 20


@pytest.mark.parametrize("page", PAGES, ids=lambda page: os.path.relpath(page, ROOT))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        file_part, _, anchor = target.partition("#")
        linked = os.path.normpath(os.path.join(os.path.dirname(page), file_part)) if file_part else page
        if not os.path.exists(linked):
            broken.append(f"{target}: no such file")
        elif anchor and linked.endswith(".md") and anchor not in anchors(linked):
            broken.append(f"{target}: no heading makes the anchor #{anchor}")
    assert not broken, broken
