"""The inspector's eval pages in headless Chromium, on the browser tests' stack: a report stored
through the API (a real HTTP request) shows in the list of evals and on its own page, with its
summary, its cases, a failed case's trajectory diff coloured line by line, its text never run as
HTML, and a case's link to its real run. Each state is saved as a screenshot (see conftest)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from ackloop.domain.eval_reports import CaseResult, CheckResult, EvalReport, summarize
from tests.browser.conftest import Inspector
from tests.browser.test_inspector import assert_fits, on_phone, text_of, wait_for, wait_status

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]

Screenshot = Callable[[str], Path]
DIFF = ("trajectory differs from the expected one:\n"
        "  = check_availability(date='2025-05-01')\n"
        "  - book_table(seats=2)\n"
        "  + book_table(seats=20)\n"
        "  ! confirm(by='sms') -> confirm(by='email')")
HOSTILE = '<img src=x onerror="document.body.dataset.pwned=1">'


def eval_case(name: str, repetition: int, run_id: str, *, passed: bool = True) -> CaseResult:
    checks = [CheckResult(name="greets", kind="assertion", value=True),
              CheckResult(name="helpfulness", kind="score", value=0.8, reason="clear enough")]
    if not passed:
        checks.append(CheckResult(name="trajectory", kind="assertion", value=False, reason=DIFF))
    return CaseResult(
        name=name, repetition=repetition, run_id=run_id, agent="echo",
        question=f"book a table ({name})", status="completed",
        answer=f"Hello from the echo desk. {HOSTILE}", passed=passed,
        score=1.0 if passed else 0.6667, checks=checks,
        trajectory=["check_availability(date='2025-05-01')",
                    f"book_table(seats={2 if passed else 20})"],
        cost_usd=0.00042, model_calls=2, tool_calls=2, wall_seconds=1.25)


def stored_report(inspector: Inspector, run_id: str) -> EvalReport:
    """greets passes both of its runs, books one of two: 3 of 4 runs pass, pass@2 100%,
    pass^2 50%; sent as ``ackloop eval`` sends it to a deployment."""
    cases = [eval_case("greets", 1, run_id), eval_case("books", 1, run_id, passed=False),
             eval_case("greets", 2, run_id), eval_case("books", 2, run_id)]
    report = EvalReport(
        eval_id=f"ev-{uuid.uuid4().hex[:8]}", name=f"reservations {HOSTILE}",
        dataset="evals/reservations.yaml", target=f"http {inspector.url}", repeat=2,
        concurrency=4, started_at=1_900_000_000.0, finished_at=1_900_000_009.0,
        summary=summarize(cases, eval_cost_usd=0.0012, judge_calls=3, wall_seconds=9.0),
        cases=cases)
    answer = inspector.api("PUT", f"/evals/{report.eval_id}", json=report.model_dump(mode="json"))
    assert answer.status_code == 200, answer.text
    return report


def facts(driver: Any) -> dict[str, str]:
    """The eval's summary, fact by fact, read in one go."""
    found: dict[str, str] = driver.execute_script("""
        return Object.fromEntries([...document.querySelectorAll('#eval-summary dd')]
          .map(dd => [dd.dataset.fact, dd.innerText.trim()]));""")
    return found


def diff_lines(driver: Any) -> list[dict[str, str]]:
    """The failed case's diff: each marked line's class, text and colour."""
    lines: list[dict[str, str]] = driver.execute_script("""
        const row = document.querySelector(
          '#eval-cases tr.case-detail[data-case="books"][data-repetition="1"]');
        return [...row.querySelectorAll('pre.reason span.diff')].map(span => ({
          kind: span.className.replace('diff ', ''), text: span.textContent.trimEnd(),
          color: getComputedStyle(span).color}));""")
    return lines


def test_an_eval_is_listed_opened_and_its_failed_case_shows_its_diff(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    run_id = inspector.start_run("hello", "echo")
    wait_for(driver, lambda _: inspector.run(run_id)["status"] == "completed", "the echo run")
    report = stored_report(inspector, run_id)

    driver.get(f"{inspector.url}/ui#/evals")
    row = f'#eval-list tr[data-eval-id="{report.eval_id}"]'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the eval in #eval-list")
    assert text_of(driver, f"{row} .pass-rate") == "75.0%"
    assert text_of(driver, f"{row} .score") == "0.917"
    assert text_of(driver, f"{row} .at-k") == "100.0% / 50.0% (k = 2)"
    assert text_of(driver, f"{row} .runs") == "4 (2 cases)"
    assert text_of(driver, f"{row} .cost") == "$0.001680"
    assert text_of(driver, f"{row} .eval-cost") == "$0.001200"
    assert HOSTILE in text_of(driver, f"{row} .name")  # shown as text, never run
    assert driver.find_element(By.CSS_SELECTOR, 'nav a[href="#/evals"]').get_attribute(
        "aria-current") == "page"
    screenshot("eval-list")

    driver.find_element(By.CSS_SELECTOR, f"{row} a.eval-link").click()
    wait_for(driver, lambda d: d.current_url.endswith(f"#/evals/{report.eval_id}")
             and facts(d).get("pass_rate"), "the eval's page and its summary")
    shown = facts(driver)
    assert shown["pass_rate"] == "75.0%" and shown["score"] == "0.917"
    assert shown["passed"] == "3 of 4; 1 failed, 0 errors"
    assert shown["runs"] == "4: 2 cases \N{MULTIPLICATION SIGN} 2, 4 at a time"
    assert shown["at_k"] == "100.0% / 50.0% (k = 2)"
    assert shown["cost"] == "$0.001680" and shown["eval_cost"] == "$0.001200 (3 judge calls)"
    assert text_of(driver, "#eval-title").startswith(f"reservations {HOSTILE}")
    assert driver.execute_script("return document.querySelectorAll('#main img').length") == 0
    assert driver.execute_script("return document.body.dataset.pwned") is None
    cases = driver.execute_script("""
        return [...document.querySelectorAll('#eval-cases tr.case')]
          .map(row => [row.dataset.case, row.dataset.repetition, row.dataset.result]);""")
    assert cases == [["greets", "1", "passed"], ["books", "1", "failed"],
                     ["greets", "2", "passed"], ["books", "2", "passed"]]
    screenshot("eval-page")

    # The failed case is open on its failed check: the diff line by line, coloured.
    failed = '#eval-cases tr.case-detail[data-case="books"][data-repetition="1"]'
    assert driver.find_element(By.CSS_SELECTOR, f"{failed} details").get_attribute("open")
    assert not driver.find_element(
        By.CSS_SELECTOR, '#eval-cases tr.case-detail[data-case="greets"] details'
    ).get_attribute("open")
    assert text_of(driver, f"{failed} .failure pre.reason") == DIFF
    lines = diff_lines(driver)
    assert [(line["kind"], line["text"]) for line in lines] == [
        ("same", "  = check_availability(date='2025-05-01')"),
        ("removed", "  - book_table(seats=2)"), ("added", "  + book_table(seats=20)"),
        ("changed", "  ! confirm(by='sms') -> confirm(by='email')")]
    colours = {line["kind"]: line["color"] for line in lines}
    assert colours["removed"] == "rgb(161, 21, 27)" and colours["added"] == "rgb(23, 98, 44)"
    assert HOSTILE in text_of(driver, f"{failed} pre.answer")
    assert "book_table(seats=20)" in text_of(driver, f"{failed} ol.trajectory")
    driver.execute_script("arguments[0].scrollIntoView()",
                          driver.find_element(By.CSS_SELECTOR, failed))
    screenshot("eval-failed-case")

    # A case's run: its link opens the run's page.
    driver.find_element(
        By.CSS_SELECTOR, '#eval-cases tr.case[data-case="greets"][data-repetition="1"] a.case-run'
    ).click()
    wait_for(driver, lambda d: d.current_url.endswith(f"#/runs/{run_id}"), "the run's page")
    wait_status(driver, "completed", "the case's run")
    assert "Hello from the echo desk." in text_of(driver, "#answer")
    screenshot("eval-case-run")

    on_phone(driver)
    driver.get(f"{inspector.url}/ui#/evals/{report.eval_id}")
    wait_for(driver, lambda d: facts(d).get("pass_rate") == "75.0%", "the eval on a phone")
    screenshot("phone-eval-page")
    assert_fits(driver)
    driver.execute_script("arguments[0].scrollIntoView()",
                          driver.find_element(By.CSS_SELECTOR, failed))
    screenshot("phone-eval-failed-case")
    assert_fits(driver)


def test_an_eval_that_is_not_there_says_so(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    driver.get(f"{inspector.url}/ui#/evals/ev-missing")
    wait_for(driver, lambda d: "no eval ev-missing" in text_of(d, "#notice"), "the 404 said")
    screenshot("eval-missing")
