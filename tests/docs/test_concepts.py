"""The architecture reads one page at a time: ``docs/architecture.md`` is a short overview that
links every concept page, each concept page is one idea a newcomer reads in one sitting, and
each is in the site's navigation."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
OVERVIEW_MAX_WORDS = 1_000
PAGE_MAX_WORDS = 4_500
"""About twenty minutes of reading."""


def words(page: Path) -> int:
    return len(page.read_text(encoding="utf-8").split())


def test_the_overview_is_short_and_links_every_concept_page() -> None:
    overview = DOCS / "architecture.md"
    assert words(overview) <= OVERVIEW_MAX_WORDS, words(overview)
    linked = set(re.findall(r"\]\(concepts/([\w-]+\.md)\)", overview.read_text()))
    pages = {page.name for page in (DOCS / "concepts").glob("*.md")}
    assert pages == linked, pages ^ linked


def test_each_concept_page_is_one_sitting_and_in_the_navigation() -> None:
    navigation = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in sorted((DOCS / "concepts").glob("*.md")):
        assert words(page) <= PAGE_MAX_WORDS, (page.name, words(page))
        assert f"concepts/{page.name}" in navigation, page.name
