"""A refused decision or event is a domain error, one of ackloop's; the API alone gives it an
HTTP status, by its reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import ackloop
from ackloop.api.errors import REFUSED_STATUS, refused
from ackloop.domain.errors import AckloopError, DecisionRefused, PermanentError, RetryableError

PACKAGE = Path(ackloop.__file__).parent


def test_a_refusal_stands_in_the_error_tree_and_carries_no_http_status() -> None:
    refusal = DecisionRefused("run_ended", "run r-1 is completed")
    assert isinstance(refusal, AckloopError)
    assert not isinstance(refusal, (RetryableError, PermanentError))
    assert (refusal.reason, str(refusal)) == ("run_ended", "run r-1 is completed")
    assert not hasattr(refusal, "status")


@pytest.mark.parametrize(("reason", "status"), [
    ("not_found", 404), ("reserved_event", 422), ("already_decided", 409),
    ("not_waiting", 409), ("run_ended", 409), ("already_received", 409),
    ("too_many_events", 409), ("event_gone", 409), ("a_reason_of_tomorrow", 409),
])
def test_the_api_answers_a_refusal_by_its_reason(reason: str, status: int) -> None:
    answer = refused(DecisionRefused(reason, "what to fix"))
    assert (answer.status, answer.code, answer.message) == (status, reason, "what to fix")


def test_every_reason_the_package_refuses_with_has_its_status() -> None:
    raised = {m for path in PACKAGE.rglob("*.py")
              for m in re.findall(r'DecisionRefused\(\s*"(\w+)"', path.read_text())}
    assert raised, "no refusal found: the pattern no longer reads the code"
    assert sorted(raised - set(REFUSED_STATUS)) == []
