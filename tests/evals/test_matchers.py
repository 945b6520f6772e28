"""The matching rules of eval checks, as tables: values, arguments, trajectories."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.evals.facts import Call
from ackloop.evals.matchers import (
    ExpectedCall,
    Mode,
    answer_diff,
    check_matcher,
    match_trajectory,
    matches,
    text_diff,
)


@pytest.mark.parametrize(("expected", "actual", "result"), [
    ("OK", "OK", True),
    ("OK", "ok", False),
    (1, 1, True),
    (1, 1.0, True),
    (1, True, False),                       # JSON types: a boolean is not a number
    (True, 1, False),
    (None, None, True),
    ({"$any": True}, "x", True),
    ({"$any": True}, None, True),
    ({"$contains": "Norm"}, "Norman, OK", True),
    ({"$contains": "norm"}, "Norman, OK", False),
    ({"$icontains": "norm"}, "Norman, OK", True),
    ({"$contains": "b"}, ["a", "b"], True),
    ({"$contains": "c"}, ["a", "b"], False),
    ({"$contains": "1"}, 1, False),
    ({"$regex": "^[A-Z]{2}$"}, "OK", True),
    ({"$regex": "^[A-Z]{2}$"}, "OKL", False),
    ({"$regex": "x"}, 5, False),
    ({"$one_of": ["OK", "TX"]}, "TX", True),
    ({"$one_of": ["OK", "TX"]}, "CA", False),
    ({"$gte": 2}, 2, True),
    ({"$gt": 2}, 2, False),
    ({"$lt": 2}, 1.5, True),
    ({"$lte": 2}, "1", False),
    ({"$lte": 2}, True, False),
    ({"state": "OK"}, {"state": "OK", "extra": 1}, True),   # only the named keys
    ({"state": "OK"}, {"state": "TX"}, False),
    ({"state": "OK"}, {}, False),
    ({"state": "OK"}, "OK", False),
    ({"q": {"$absent": True}}, {}, True),
    ({"q": {"$absent": True}}, {"q": 1}, False),
    ({"q": {"$any": True}}, {}, False),
    ([1, {"$gt": 1}], [1, 2], True),
    ([1, 2], [1, 2, 3], False),
    ({"a": {"b": {"$regex": "z"}}}, {"a": {"b": "xyz"}}, True),
])
def test_matches(expected: Any, actual: Any, result: bool) -> None:
    assert matches(expected, actual) is result


@pytest.mark.parametrize("bad", [{"$nope": 1}, {"x": {"$regex": "("}}, {"$one_of": "a"},
                                 [{"$what": 1}]])
def test_a_matcher_that_cannot_check_anything_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        check_matcher(bad)


def _calls(*specs: tuple[str, dict[str, Any]] | str) -> list[Call]:
    out = []
    for i, spec in enumerate(specs):
        name, args = (spec, {}) if isinstance(spec, str) else spec
        out.append(Call(name=name, args=args, step=f"{i:04d}-tool-000", agent="a"))
    return out


IP, LOC, ALERTS = "get_ip_address", "get_location_info", "get_weather_alerts"
MADE = _calls(IP, (LOC, {"ipaddress": "203.0.113.7"}), (ALERTS, {"state": "OK"}))


@pytest.mark.parametrize(("expected", "mode", "passed", "score"), [
    ([IP, LOC, ALERTS], "exact", True, 1.0),
    ([IP, ALERTS], "exact", False, 1 / 3),           # LOC made where ALERTS was expected
    ([IP, LOC, ALERTS, ALERTS], "exact", False, 3 / 4),
    ([IP, ALERTS], "in_order", True, 1.0),            # others between are allowed
    ([ALERTS, IP], "in_order", False, 1 / 2),         # the order matters
    ([ALERTS, IP], "any_order", True, 1.0),
    ([ALERTS, ALERTS], "any_order", False, 1 / 2),    # each expected call needs its own call
    ([], "exact", False, 0.0),
    ([], "in_order", True, 1.0),
    ([{"name": ALERTS, "args": {"state": "OK"}}], "in_order", True, 1.0),
    ([{"name": ALERTS, "args": {"state": "TX"}}], "in_order", False, 0.0),
    ([{"name": ALERTS, "args": {"state": {"$one_of": ["OK", "TX"]}}}], "any_order", True, 1.0),
    ([{"name": LOC, "args": {"ipaddress": {"$regex": r"^\d+\.\d+"}}}], "in_order", True, 1.0),
    ([{"name": IP, "agent": "b"}], "in_order", False, 0.0),
])
def test_trajectory(expected: list[Any], mode: Mode, passed: bool, score: float) -> None:
    found = match_trajectory([ExpectedCall.of(e) for e in expected], MADE, mode)
    assert (found.passed, round(found.score, 6)) == (passed, round(score, 6)), found.reason()


def test_any_order_matches_strict_expectations_before_loose_ones() -> None:
    """A loose matcher listed first must not take the only call a strict one accepts."""
    made = _calls((ALERTS, {"state": "OK"}), (ALERTS, {"state": "TX"}))
    expected = [ExpectedCall.of(ALERTS), ExpectedCall.of({"name": ALERTS, "args": {"state": "OK"}})]
    assert match_trajectory(expected, made, "any_order").passed


def test_the_exact_diff_marks_each_call() -> None:
    found = match_trajectory([ExpectedCall.of(e) for e in (IP, LOC, "get_forecast")], MADE,
                             "exact")
    assert found.lines[1:] == [
        "  = get_ip_address({})",
        '  = get_location_info({"ipaddress": "203.0.113.7"})',
        "  - get_forecast(…)  (expected)",
        '  + get_weather_alerts({"state": "OK"})  (made)',
    ]


def test_a_missing_call_is_named_with_the_calls_made() -> None:
    found = match_trajectory([ExpectedCall.of("get_forecast")], MADE, "any_order")
    assert "  - get_forecast(…)  (expected, not made)" in found.lines
    assert found.lines[-1] == f"  calls made: {IP}, {LOC}, {ALERTS}"


@pytest.mark.parametrize("spec", [{"args": {}}, {"name": "x", "when": 1}, 3,
                                  {"name": "x", "args": "state"}])
def test_an_expected_call_says_what_is_wrong(spec: Any) -> None:
    with pytest.raises(ValueError):
        ExpectedCall.of(spec)


def test_text_diff_is_bounded() -> None:
    lines = text_diff("\n".join(map(str, range(100))), "\n".join(map(str, range(1, 101))),
                      width=5)
    assert len(lines) == 6 and lines[-1].startswith("… ")


@pytest.mark.parametrize(("expected", "actual", "says"), [
    ("No alerts.", "I can't answer that.",
     ["expected 'No alerts.', answered \"I can't answer that.\""]),
    ("a\nb\nc", "a\nB\nc", ["the answer differs from the expected:", "-b", "+B"]),
    ({"state": "TX"}, {"state": "OK"}, ['expected {"state": "TX"}, answered {"state": "OK"}']),
    (None, "x", ['expected null, answered "x"']),
    ("x" * 300, 1, ["…, answered 1"]),
])
def test_answer_diff_says_how_the_answer_differs(expected: Any, actual: Any,
                                                 says: list[str]) -> None:
    text = answer_diff(expected, actual)
    for part in says:
        assert part in text.splitlines() or part in text, (part, text)
