"""The tutorial's code is written out in its pages, so they read whole in the repository as on
the site, and each block is the code of the example app it shows, line for line: a block
follows a comment ``<!-- same as PATH[:SECTION] ... -->`` and equals that file, or the lines
between its ``# --8<-- [start:SECTION]`` and ``[end:SECTION]`` markers."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = sorted((ROOT / "docs" / "tutorial").glob("*.md"))
SOURCE = re.compile(r"^<!-- same as (?P<path>[^\s:,]+)(?::(?P<section>\w+))?[ ,]")
FENCE = re.compile(r"^(`{3,}|~{3,})")
MARKER = re.compile(r"^\s*# --8<-- \[(start|end):(\w+)\]\s*$")


def source_lines(path: str, section: str | None) -> list[str]:
    """The lines a block shows: the whole file's, or one section's; markers left out."""
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    if section is None:
        return [line for line in lines if not MARKER.match(line)]
    inside = False
    shown: list[str] = []
    for line in lines:
        marker = MARKER.match(line)
        if marker and marker.group(2) == section:
            if marker.group(1) == "end":
                break
            inside = True
        elif inside and not marker:
            shown.append(line)
    assert shown, f"{path} has no section {section!r}"
    return shown


def blocks(page: Path) -> list[tuple[str, str | None, list[str], int]]:
    """Each block that says what it shows: its file, its section, its lines, its line number."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found = []
    for index, line in enumerate(lines):
        named = SOURCE.match(line)
        if not named:
            continue
        fence = FENCE.match(lines[index + 1])
        assert fence, f"{page.name}:{index + 2}: no code block after the comment"
        end = next(i for i in range(index + 2, len(lines)) if lines[i] == fence.group(1))
        found.append((named["path"], named["section"], lines[index + 2:end], index + 1))
    return found


@pytest.mark.parametrize("page", TUTORIAL, ids=lambda page: page.name)
def test_the_page_holds_code_not_include_markers(page: Path) -> None:
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        assert not line.startswith("--8<--"), f"{page.name}:{number}: {line}"


@pytest.mark.parametrize("page", TUTORIAL, ids=lambda page: page.name)
def test_each_block_is_the_example_apps_code(page: Path) -> None:
    for path, section, shown, number in blocks(page):
        assert shown == source_lines(path, section), (
            f"{page.name}:{number}: the block differs from {path}"
            f"{':' + section if section else ''}; copy it again from there")


def test_every_block_that_names_a_file_of_the_app_says_which() -> None:
    shown = 0
    for page in TUTORIAL:
        lines = page.read_text(encoding="utf-8").splitlines()
        for index, line in enumerate(lines):
            if FENCE.match(line) and 'title="' in line:
                assert index and SOURCE.match(lines[index - 1]), (
                    f"{page.name}:{index + 1}: a file's code with no '<!-- same as ... -->'")
        shown += len(blocks(page))
    assert shown >= 14, shown
