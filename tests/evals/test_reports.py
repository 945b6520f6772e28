"""An eval's report as a table, Markdown and JUnit XML, and its comparison with a baseline."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ackloop.domain.eval_reports import CaseResult, CheckResult, EvalReport, compare, summarize
from ackloop.evals.render import junit, markdown, terminal

DIFF = ("1 of 2 expected call(s) in place, 2 made (exact)\n  = get_ip_address({})\n"
        "  - get_weather_alerts(…)  (expected)\n  + get_alerts({\"state\": \"OK\"})  (made)")


def report(*, failing: bool = True, cost: float = 0.001, eval_id: str = "ev-1") -> EvalReport:
    ok = CaseResult(name="alerts-ok", run_id="run-1", link="http://api/ui/#/runs/run-1",
                    agent="default", question="alerts in OK?", status="completed",
                    answer="2 alerts", passed=True, score=1.0, cost_usd=cost, model_calls=2,
                    tool_calls=1, wall_seconds=1.5,
                    checks=[CheckResult(name="trajectory", kind="assertion", value=True)],
                    trajectory=['get_weather_alerts({"state": "OK"})'])
    bad = ok.model_copy(update={
        "name": "alerts-here", "run_id": "run-2", "passed": not failing,
        "score": 0.25 if failing else 1.0, "answer": "I can't answer that",
        "checks": [CheckResult(name="trajectory", kind="assertion", value=not failing,
                               reason=DIFF if failing else None),
                   CheckResult(name="trajectory_score", kind="score", value=0.5)]})
    broken = CaseResult(name="timeout", error="run run-3 did not end in time (it is running)")
    cases = [ok, bad, broken]
    return EvalReport(eval_id=eval_id, name="builtin", target="local stack", cases=cases,
                      summary=summarize(cases, eval_cost_usd=0.0002, judge_calls=1,
                                        wall_seconds=3.0))


def test_the_summary_counts_runs_scores_and_spend() -> None:
    s = report().summary
    assert (s.runs, s.passed, s.failed, s.errors) == (3, 1, 1, 1)
    assert s.score == pytest.approx((1.0 + 0.25 + 0.0) / 3)
    assert s.cost_usd == pytest.approx(0.002) and s.eval_cost_usd == 0.0002
    assert s.slowest_case_seconds == 1.5


def test_the_table_shows_each_case_and_why_one_failed() -> None:
    text = terminal(report())
    assert "alerts-ok" in text and "http://api/ui/#/runs/run-1" in text
    assert "✗ alerts-here (run run-2)" in text
    assert "  trajectory: 1 of 2 expected call(s) in place, 2 made (exact)" in text
    assert "      - get_weather_alerts(…)  (expected)" in text
    assert "  answer: I can't answer that" in text
    assert "  error: run run-3 did not end in time" in text
    assert "1 of 3 run(s) passed (33%)" in text


def test_junit_has_a_failure_and_an_error_with_their_reasons() -> None:
    suite = ET.fromstring(junit(report()))
    assert suite.tag == "testsuite"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"alerts-ok", "alerts-here", "timeout"}
    failure = cases["alerts-here"].find("failure")
    assert failure is not None and failure.get("message") == "failed: trajectory"
    assert "+ get_alerts" in (failure.text or "")
    assert cases["timeout"].find("error") is not None
    assert cases["alerts-ok"].find("failure") is None
    out = cases["alerts-ok"].findtext("system-out") or ""
    assert "link: http://api/ui/#/runs/run-1" in out
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["cost_usd"] == "0.002000" and props["eval_cost_usd"] == "0.000200"


def test_markdown_has_the_table_and_the_diff() -> None:
    text = markdown(report())
    assert "| alerts-ok | ✅ pass | 1.00 |" in text
    assert "[run-1](http://api/ui/#/runs/run-1)" in text
    assert "```diff" in text and "      + get_alerts({\"state\": \"OK\"})  (made)" in text


def test_a_report_round_trips_as_json() -> None:
    first = report()
    assert EvalReport.model_validate_json(first.model_dump_json()) == first


@pytest.mark.parametrize(("now", "kwargs", "problems"), [
    (report(failing=False), {}, []),
    (report(failing=True), {}, []),
    (report(failing=False, cost=0.0011), {"cost_increase": 0.2}, []),
    (report(failing=False, cost=0.002), {"cost_increase": 0.5},
     ["cost $0.004000 is above the baseline's $0.002000 by more than 50%"]),
])
def test_compare_with_a_failing_baseline(now: EvalReport, kwargs: dict[str, float],
                                         problems: list[str]) -> None:
    assert compare(now, report(failing=True), **kwargs) == problems


def test_compare_names_the_regressed_case_and_the_lower_score() -> None:
    problems = compare(report(failing=True), report(failing=False))
    assert problems == [
        "score 0.417 is below the baseline's 0.667",
        "pass rate 33.3% is below the baseline's 66.7%",
        "case alerts-here [1] passed in the baseline, fails now (trajectory)",
    ]
    assert compare(report(failing=True), report(failing=False), score_drop=0.3)[0].startswith(
        "pass rate")
