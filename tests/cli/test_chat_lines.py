"""What ``ackloop chat`` reads in a line the user typed, and in an answer to an approval."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.cli.chat import Line, read_decision, read_line


@pytest.mark.parametrize(("raw", "line"), [
    ("where am I?", Line("ask", "where am I?")),
    ("  pay 40 to Ada  ", Line("ask", "pay 40 to Ada")),
    ("", Line("empty")),
    ("   ", Line("empty")),
    ("/file photo.png", Line("file", "photo.png")),
    ("/file  gs://bucket/a.pdf ", Line("file", "gs://bucket/a.pdf")),
    ("/file", Line("unknown", "/file needs a path: /file photo.png")),
    ("/new", Line("new", "/new")),
    ("/HELP", Line("help", "/HELP")),
    ("/quit", Line("quit", "/quit")),
    ("/exit", Line("quit", "/exit")),
    ("/q", Line("quit", "/q")),
    ("/frobnicate now", Line("unknown", "/frobnicate now")),
])
def test_a_typed_line_is_a_question_or_a_command(raw: str, line: Line) -> None:
    assert read_line(raw) == line


ARGS = {"to": "Ada", "amount": 40}


@pytest.mark.parametrize(("answer", "decision"), [
    ("y", ("approve", None)),
    ("YES", ("approve", None)),
    ("approve", ("approve", None)),
    ("n", ("reject", None)),
    ("reject", ("reject", None)),
    ('e {"to": "Ada", "amount": 30}', ("approve", {"to": "Ada", "amount": 30})),
    ("e", 'give the arguments as a JSON object, e.g. e {"to": "Ada", "amount": 40}'),
    ("e [1, 2]", 'give the arguments as a JSON object, e.g. e {"to": "Ada", "amount": 40}'),
    ("e {amount: 3}", "not JSON: Expecting property name enclosed in double quotes; e.g. "
                      'e {"to": "Ada", "amount": 40}'),
    ("maybe", "answer y (approve), n (reject) or e {JSON} (approve these arguments)"),
    ("", "answer y (approve), n (reject) or e {JSON} (approve these arguments)"),
])
def test_an_answer_to_an_approval_is_a_decision_or_says_what_to_type(
        answer: str, decision: Any) -> None:
    assert read_decision(answer, ARGS) == decision
