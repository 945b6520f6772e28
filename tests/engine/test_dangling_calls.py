"""``conversation.answer_dangling_calls``: every function call the history leaves unanswered
is answered "not executed" right after it; an answered one, or a content without calls, is
left as it is (it runs over the whole view on every model call)."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.transcript.conversation import NOT_EXECUTED, answer_dangling_calls


def _asks(*names: str) -> dict[str, Any]:
    return {"role": "model", "parts": [{"function_call": {"name": n, "args": {}}} for n in names]}


def _answers(name: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"function_response": {"name": name,
                                                             "response": {"result": 1}}}]}


def _not_run(*names: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"function_response": {"name": n, "response": NOT_EXECUTED}}
                                      for n in names]}


QUESTION = {"role": "user", "parts": [{"text": "hi"}]}
TEXT = {"role": "model", "parts": [{"text": "an answer"}]}


@pytest.mark.parametrize(("contents", "expected"), [
    ([], []),
    ([QUESTION, TEXT], [QUESTION, TEXT]),
    ([QUESTION, _asks("a"), _answers("a"), TEXT], [QUESTION, _asks("a"), _answers("a"), TEXT]),
    # Asked last: answered after it.
    ([QUESTION, _asks("a", "b")], [QUESTION, _asks("a", "b"), _not_run("a", "b")]),
    # Asked, then the conversation went on without an answer: answered in between.
    ([QUESTION, _asks("a"), QUESTION, TEXT], [QUESTION, _asks("a"), _not_run("a"), QUESTION,
                                              TEXT]),
    ([_asks("a"), {"role": "user", "parts": []}],
     [_asks("a"), _not_run("a"), {"role": "user", "parts": []}]),
    # A user content's text is not an answer; a model content without calls asks nothing.
    ([_asks("a"), TEXT, _asks("b"), _answers("b")],
     [_asks("a"), _not_run("a"), TEXT, _asks("b"), _answers("b")]),
])
def test_unanswered_calls_are_answered_not_executed(contents: list[dict[str, Any]],
                                                    expected: list[dict[str, Any]]) -> None:
    assert answer_dangling_calls(contents) == expected
