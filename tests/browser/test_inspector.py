"""The run inspector (``/ui``) in headless Chromium against a stack of real processes: the run
list and its filters, a live timeline, a failed run's cause, redriving a real dead letter, and
bearer auth. Each state is saved as a screenshot (see conftest)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait

from tests.browser.agents import SURVEYS
from tests.browser.conftest import BEARER_TOKEN, WAIT_S, Inspector

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]

Screenshot = Callable[[str], Path]


def wait_for(driver: Any, condition: Callable[[Any], Any], what: str,
             timeout: float = WAIT_S) -> Any:
    """Poll ``condition(driver)`` until it is truthy; fail naming ``what`` otherwise."""
    return WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        condition, message=f"waited {timeout:g} s for {what}")


def listed(driver: Any) -> list[str]:
    """The run ids ``#run-list`` shows, read in one go (the list re-renders as it refreshes)."""
    ids: list[str] = driver.execute_script(
        "return [...document.querySelectorAll('#run-list tr[data-run-id]')]"
        ".map(row => row.dataset.runId)")
    return ids


def run_state(driver: Any) -> dict[str, Any] | None:
    """``section#run``'s status and the timeline's bars, read in one go."""
    state: dict[str, Any] | None = driver.execute_script("""
        const run = document.querySelector('section#run');
        if (!run) return null;
        const bars = [...document.querySelectorAll('#timeline .bar')];
        return {status: run.dataset.status, steps: bars.map(bar => bar.dataset.step)};""")
    return state


def text_of(driver: Any, selector: str) -> str:
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    return str(found[0].text) if found else ""


def retype(field: Any, value: str) -> None:
    """Replace an input's text as a user does, then leave it (input and change events)."""
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.BACKSPACE)
    field.send_keys(value, Keys.TAB)


def choose(driver: Any, select_id: str, value: str) -> None:
    """Pick an option of a select from the keyboard (Home, then arrow down to it), as a user
    tabbing through does."""
    field = driver.find_element(By.ID, select_id)
    values = [o.get_attribute("value") for o in Select(field).options]
    field.send_keys(Keys.HOME, *[Keys.ARROW_DOWN] * values.index(value))
    wait_for(driver, lambda d: Select(d.find_element(By.ID, select_id))
             .first_selected_option.get_attribute("value") == value, f"{select_id}={value}")


def open_run(driver: Any, inspector: Inspector, run_id: str) -> None:
    driver.get(f"{inspector.url}/ui#/runs/{run_id}")


def on_phone(driver: Any) -> None:
    """Show the page as a phone does: 390 CSS pixels wide, touch, twice the pixel density."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True})
    driver.refresh()


def assert_fits(driver: Any) -> None:
    """Nothing on the page is wider than the screen (no sideways scrolling to read it)."""
    page, screen = driver.execute_script(
        "return [document.documentElement.scrollWidth, window.innerWidth]")
    assert page <= screen, f"the page is {page} px wide on a {screen} px screen"


def wait_status(driver: Any, status: str, what: str) -> dict[str, Any]:
    state: dict[str, Any] = wait_for(
        driver, lambda d: (s := run_state(d)) and s["status"] == status and s, what)
    return state


def test_runs_appear_in_the_list_and_filters_narrow_it(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    tag = uuid.uuid4().hex[:8]
    echo_run = inspector.start_run("hello", "echo", f"greet-{tag}")
    survey_run = inspector.start_run("survey the sites", "surveyor", f"survey-{tag}")
    driver.get(f"{inspector.url}/ui#/")
    wait_for(driver, lambda d: {echo_run, survey_run} <= set(listed(d)),
             "both runs in #run-list")
    row = driver.find_element(By.CSS_SELECTOR, f'#run-list tr[data-run-id="{echo_run}"]')
    assert row.find_element(By.CSS_SELECTOR, ".agent").text == "echo"
    assert "hello" in row.find_element(By.CSS_SELECTOR, ".text").text
    screenshot("run-list")

    retype(driver.find_element(By.ID, "filter-agent"), "echo")
    wait_for(driver, lambda d: echo_run in listed(d) and survey_run not in listed(d),
             "the agent filter to keep only the echo run")
    retype(driver.find_element(By.ID, "filter-agent"), "")
    retype(driver.find_element(By.ID, "filter-conversation"), f"survey-{tag}")
    wait_for(driver, lambda d: listed(d) == [survey_run],
             "the conversation filter to keep only the surveyor run")
    retype(driver.find_element(By.ID, "filter-conversation"), "")

    wait_for(driver, lambda _: all(inspector.run(r)["status"] == "completed"
                                   for r in (echo_run, survey_run)), "both runs to complete")
    choose(driver, "filter-status", "failed")
    wait_for(driver, lambda d: not {echo_run, survey_run} & set(listed(d)),
             "status=failed to hide both completed runs")
    choose(driver, "filter-status", "completed")
    wait_for(driver, lambda d: {echo_run, survey_run} <= set(listed(d)),
             "status=completed to show both runs")

    # Keyboard: Enter on a row's link opens the run.
    link = f'#run-list tr[data-run-id="{echo_run}"] a.run-link'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, link), "the echo run's link")
    driver.find_element(By.CSS_SELECTOR, link).send_keys(Keys.ENTER)
    wait_for(driver, lambda d: d.current_url.endswith(f"#/runs/{echo_run}"),
             "Enter on a.run-link to open the run")
    wait_status(driver, "completed", "the echo run's view")

    on_phone(driver)
    driver.get(f"{inspector.url}/ui#/")
    wait_for(driver, lambda d: echo_run in listed(d), "the run list on a phone")
    screenshot("phone-run-list")
    assert_fits(driver)


def test_a_live_run_grows_its_timeline_until_it_completes(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    run_id = inspector.start_run("survey the sites", "surveyor")
    open_run(driver, inspector, run_id)
    first = wait_for(driver, lambda d: (s := run_state(d)) and s["steps"] and s,
                     "the first bar of the timeline")
    assert first["status"] in ("queued", "running"), first
    seen = len(first["steps"])
    grown = wait_for(
        driver, lambda d: (s := run_state(d)) and len(s["steps"]) > seen
        and s["status"] == "running" and s,
        f"the timeline to grow past {seen} bar(s) while the run is live")
    assert driver.find_element(By.ID, "cancel").is_enabled()
    driver.execute_script("document.getElementById('timeline').scrollIntoView()")
    screenshot("live-timeline")

    done = wait_status(driver, "completed", "the run to complete")
    view = inspector.run(run_id)
    keys = [step["key"] for step in view["steps"]]
    assert len(keys) == 2 * SURVEYS + 1 and len(grown["steps"]) < len(keys)
    wait_for(driver, lambda d: run_state(d)["steps"] == keys,
             f"one bar per step, in order: {keys}")
    assert view["answer"] == "Surveyed site-1, site-2, site-3: all dry."
    wait_for(driver, lambda d: view["answer"] in text_of(d, "#answer"), "the answer")
    assert "completed" in text_of(driver, "#run-status"), done
    assert "answered" in text_of(driver, "#run-status")
    wait_for(driver, lambda d: "$" in text_of(d, "#cost"), "the run's cost in dollars")
    transcript = text_of(driver, "#transcript")
    for seen_text in ("survey the sites", "survey_site", "site-2", "site-3 is dry",
                      view["answer"]):
        assert seen_text in transcript, (seen_text, transcript)
    assert not driver.find_element(By.ID, "cancel").is_enabled()
    screenshot("completed-run")

    on_phone(driver)
    wait_status(driver, "completed", "the run view on a phone")
    screenshot("phone-run")
    assert_fits(driver)


def test_a_failed_run_shows_its_cause(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    run_id = inspector.start_run("survey the archive", "fragile")
    open_run(driver, inspector, run_id)
    wait_status(driver, "failed", "the run to fail")
    view = inspector.run(run_id)
    assert view["status"] == "failed" and "gave dict" in (view["error"] or ""), view
    wait_for(driver, lambda d: "gave dict" in text_of(d, "#run-error"),
             "the failure's cause in #run-error")
    screenshot("failed-run")


def test_a_dead_letter_is_redriven_from_the_page_and_its_run_completes(
    driver: Any, inspector: Inspector, screenshot: Screenshot
) -> None:
    """A model that keeps asking for more time than a request may wait uses up the step's five
    deliveries: Pub/Sub dead-letters it, and the run fails. Once the model answers again, the
    page's redrive button re-publishes the step and the run completes."""
    stack = inspector.stack
    stack.schedule_model_faults("429:30*40")
    try:
        run_id = inspector.start_run("hello again", "echo")
        wait_for(driver, lambda _: inspector.run(run_id)["status"] == "failed",
                 "the run to be dead-lettered", timeout=180)
    finally:
        httpx.post(f"{stack.fake_gemini}/_admin/reset", timeout=5).raise_for_status()
    failed = inspector.run(run_id)
    assert (failed["error"] or "").startswith("dead_lettered")
    attempts = failed["steps"][0]["attempts"]
    assert attempts > 1, failed["steps"]

    # The failed run's timeline marks the step's repeated attempts.
    open_run(driver, inspector, run_id)
    wait_status(driver, "failed", "the dead-lettered run's view")
    bar = '#timeline .bar[data-step="0000-model"]'
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, f"{bar} .retry"),
             "a retry marker on the step's bar")
    marked = driver.find_element(By.CSS_SELECTOR, bar)
    assert marked.get_attribute("data-attempts") == str(attempts)
    assert f"{attempts} attempts" in (marked.get_attribute("aria-label") or "")
    driver.execute_script("document.getElementById('timeline').scrollIntoView()")
    screenshot("dead-lettered-run")
    (letter,) = [d for d in asyncio.run(stack.store().list_dead_letters())
                 if d.data["run_id"] == run_id]
    row = f'#dead-letters tr[data-message-id="{letter.data["message_id"]}"]'

    driver.get(f"{inspector.url}/ui#/dead-letters")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the dead letter's row")
    assert driver.find_elements(By.CSS_SELECTOR, "table#poison")
    screenshot("dead-letters-before-redrive")
    driver.find_element(By.CSS_SELECTOR, f"{row} button.redrive").click()
    wait_for(driver, lambda d: "redriven" in text_of(d, f"{row} .outcome"),
             "the row's outcome: redriven")
    screenshot("dead-letters-after-redrive")

    open_run(driver, inspector, run_id)
    wait_status(driver, "completed", "the redriven run to complete")
    wait_for(driver, lambda d: "Hello from the echo desk." in text_of(d, "#answer"),
             "the redriven run's answer")


def test_bearer_auth_without_the_token_says_401_and_with_it_works(
    driver: Any, bearer_inspector: Inspector, screenshot: Screenshot
) -> None:
    run_id = bearer_inspector.start_run("hello with a token", "echo")
    assert httpx.get(f"{bearer_inspector.url}/runs", timeout=10).status_code == 401

    driver.get(f"{bearer_inspector.url}/ui#/")
    wait_for(driver, lambda d: "token" in text_of(d, "#notice"), "the notice: a token is needed")
    assert driver.find_element(By.ID, "notice").get_attribute("role") == "alert"
    screenshot("bearer-401")

    driver.find_element(By.ID, "token").send_keys(BEARER_TOKEN, Keys.ENTER)
    wait_for(driver, lambda d: run_id in listed(d), "the run, listed with the token")
    wait_for(driver, lambda d: not text_of(d, "#notice"), "the notice to go")
    screenshot("bearer-with-token")
