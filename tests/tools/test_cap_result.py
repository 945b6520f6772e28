"""A tool result over the size cap keeps a truthful, non-empty prefix within the cap."""

from __future__ import annotations

import json
import re

import pytest

from ackloop.tools.outcome import cap_result, success_outcome

MARKER = re.compile(r"\n\.\.\.\[truncated: (\d+) of (\d+) bytes omitted\]$")


@pytest.mark.parametrize("text", [
    "\x01" * 100_000,           # every character escapes to six bytes (\u0001)
    '"\\' * 50_000,             # every character escapes to two bytes
    "é€😀" * 30_000,            # multi-byte UTF-8
    "plain ascii " * 10_000,
])
def test_escape_heavy_results_keep_a_truthful_prefix_within_the_cap(text: str) -> None:
    max_bytes = 1_000
    capped = cap_result(text, max_bytes)
    assert len(json.dumps({"result": capped}, ensure_ascii=False).encode()) <= max_bytes
    found = MARKER.search(capped)
    assert found is not None
    kept = capped[: found.start()]
    assert kept and text.startswith(kept)  # not cut down to nothing
    total = len(text.encode())
    assert int(found[2]) == total and int(found[1]) == total - len(kept.encode())
    # The longest prefix that fits: one more character would not.
    one_more = text[: len(kept) + 1]
    dropped = total - len(one_more.encode())
    longer = f"{one_more}\n...[truncated: {dropped} of {total} bytes omitted]"
    assert len(json.dumps({"result": longer}, ensure_ascii=False).encode()) > max_bytes


def test_a_structured_result_is_cut_as_its_json_text() -> None:
    outcome = success_outcome({"rows": ["\x00" * 50] * 400}, 2_000)
    result = outcome.response["result"]
    assert isinstance(result, str) and result.startswith('{"rows": ["')
    assert len(json.dumps(outcome.response, ensure_ascii=False).encode()) <= 2_000


def test_a_result_within_the_cap_is_unchanged() -> None:
    assert cap_result({"a": "\x01" * 10}, 1_000) == {"a": "\x01" * 10}
