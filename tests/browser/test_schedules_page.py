"""The schedules page (``#/schedules``) in headless Chromium, against a stack of its own whose
catalog declares a schedule beside its agent, every 2 seconds (tests/browser/schedule_catalog.py):
one sweep stores it and arms its first wake, the local task queue fires it; the page lists it
with its next firings and its last runs (each a link to a completed run), pauses it (it fires
no more) and triggers it; a caller who is not an operator sees the API's refusal."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from tests.browser.conftest import BEARER_TOKEN, WAIT_S, Inspector, bearer_api
from tests.browser.schedule_catalog import AGENT, EVERY_SECONDS, SCHEDULE_ID
from tests.browser.test_inspector import text_of, wait_for, wait_status
from tests.support.emulators import EmulatorSession
from tests.support.stack import start_stack

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]

ROW = f'#schedule-list tr[data-schedule-id="{SCHEDULE_ID}"]'


@pytest.fixture(scope="module")
def scheduled(browser_paths: tuple[str, str], emulator_session: EmulatorSession,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inspector]:
    """A stack serving the schedule's catalog (``api_auth`` none: the caller is an operator)."""
    running = start_stack(emulator_session, tmp_path_factory.mktemp("schedules"),
                          agents="tests.browser.schedule_catalog:catalog")
    try:
        yield Inspector(running, f"http://127.0.0.1:{running.state.ports['api']}")
    finally:
        running.stop()


def until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Poll ``check()`` (an API read) until it is truthy; fail naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        if found := check():
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.3)


def schedule(inspector: Inspector) -> dict[str, Any]:
    answer = inspector.api("GET", f"/schedules/{SCHEDULE_ID}")
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    return view


def status(inspector: Inspector, run_id: str) -> str | None:
    """The run's status; None while it does not exist yet (a firing records itself, then
    starts its run)."""
    answer = inspector.api("GET", f"/runs/{run_id}")
    if answer.status_code == 404:
        return None
    assert answer.status_code == 200, answer.text
    found: str = answer.json()["status"]
    return found


def completed_runs(inspector: Inspector, view: dict[str, Any], outcome: str) -> list[str]:
    """The runs of the schedule's firings of ``outcome`` that completed."""
    runs = [f["run_id"] for f in view["firings"] if f["outcome"] == outcome and f["run_id"]]
    return [r for r in runs if status(inspector, r) == "completed"]


def row(driver: Any) -> dict[str, Any] | None:
    """The schedule's row as the page shows it, read in one go (it re-renders as it refreshes)."""
    found: dict[str, Any] | None = driver.execute_script("""
        const row = document.querySelector(arguments[0]);
        if (!row) return null;
        const cell = (name) => row.querySelector(`td.${name}`).innerText.trim();
        return {state: row.dataset.state, id: cell('id'), agent: cell('agent'),
          when: cell('when'), overlap: cell('overlap'), shown: cell('state'),
          next: [...row.querySelectorAll('td.next li')].map(li => li.innerText.trim()),
          last: [...row.querySelectorAll('td.last li')].map(li => ({
            outcome: li.dataset.outcome, run: li.dataset.runId || null,
            href: li.querySelector('a.firing-run')?.getAttribute('href') || null})),
          toggle: row.querySelector('button.toggle').innerText.trim()};""", ROW)
    return found


def click(driver: Any, selector: str) -> None:
    """Click the element ``selector`` finds, again if a refresh replaced it meanwhile."""

    def clicked(d: Any) -> bool:
        try:
            d.find_element(By.CSS_SELECTOR, selector).click()
        except StaleElementReferenceException:
            return False
        return True

    wait_for(driver, clicked, f"a click on {selector}")


def test_a_catalog_schedule_fires_and_is_paused_and_triggered_from_its_page(
    driver: Any, scheduled: Inspector, screenshot: Callable[[str], Path]
) -> None:
    # One sweep stores the catalog's schedule and arms its first wake (the stack's sweeper
    # would, within its minute); the local task queue fires it from then on.
    swept = scheduled.api("POST", "/sweep")
    assert swept.status_code == 200, swept.text
    fired = until(lambda: len(completed_runs(scheduled, schedule(scheduled), "started")) >= 2
                  and schedule(scheduled), "two firings of the schedule, their runs completed")
    assert fired["source"] == "catalog" and fired["spec"]["agent"] == AGENT

    driver.get(f"{scheduled.url}/ui#/schedules")
    assert driver.find_element(By.CSS_SELECTOR, 'nav a[href="#/schedules"]'
                               ).get_attribute("aria-current") == "page"

    def runs_linked(d: Any) -> dict[str, Any] | None:
        shown = row(d)
        linked = [f for f in shown["last"] if f["outcome"] == "started" and f["href"]
                  ] if shown else []
        return shown if shown and len(linked) >= 2 else None

    shown = wait_for(driver, runs_linked, "the schedule's row with two runs linked")
    assert shown["id"].split()[0] == SCHEDULE_ID and "catalog" in shown["id"]
    assert (shown["agent"], shown["when"], shown["overlap"]) == (
        AGENT, f"every {EVERY_SECONDS} s", "skip")
    assert (shown["state"], shown["shown"], shown["toggle"]) == ("active", "active", "Pause")
    assert len(shown["next"]) == 3 and all(t.endswith(" UTC") for t in shown["next"])
    done = set(completed_runs(scheduled, schedule(scheduled), "started"))
    linked = [f for f in shown["last"] if f["run"] in done]
    assert len(linked) >= 2, shown["last"]
    for firing in linked:
        assert firing["href"] == f"#/runs/{firing['run']}"
    screenshot("schedules-firing")

    # A last run's link opens its run.
    run_id = linked[-1]["run"]  # the newest: the last to leave the row as it fires on
    click(driver, f'{ROW} td.last li[data-run-id="{run_id}"] a.firing-run')
    wait_for(driver, lambda d: d.current_url.endswith(f"#/runs/{run_id}"), "the run's page")
    wait_status(driver, "completed", "the scheduled run's page")
    assert run_id in text_of(driver, "#run-title")
    assert "Check in." in text_of(driver, "section#run")  # the schedule's question

    # Paused from the page: the page and the API say so, and it fires no more by itself.
    driver.get(f"{scheduled.url}/ui#/schedules")
    wait_for(driver, row, "the schedule's row")
    click(driver, f"{ROW} button.toggle")
    paused = wait_for(driver, lambda d: (r := row(d)) and r["state"] == "paused" and r,
                      "the row to show the schedule paused")
    assert (paused["shown"], paused["toggle"], paused["next"]) == ("paused", "Resume", [])
    assert "paused" in text_of(driver, "#schedule-action")
    view = schedule(scheduled)
    assert view["paused"] is True and view["next_firings"] == []
    paused_at = time.monotonic()
    last_fired = max(f["at"] for f in view["firings"] if f["outcome"] == "started")
    screenshot("schedules-paused")

    # Triggered from the page once its last run is over (the policy is skip): a manual run.
    until(lambda: all(status(scheduled, f["run_id"]) == "completed"
                      for f in schedule(scheduled)["firings"] if f["run_id"]),
          "the schedule's runs to be over")
    click(driver, f"{ROW} button.trigger")
    manual = wait_for(driver, lambda d: (r := row(d)) and next(
        (f for f in r["last"] if f["outcome"] == "manual" and f["href"]), None),
        "a manual firing with its run in the row")
    assert "triggered" in text_of(driver, "#schedule-action")
    assert driver.find_element(By.CSS_SELECTOR, "#schedule-action a.triggered-run"
                               ).text == manual["run"]
    until(lambda: status(scheduled, manual["run"]) == "completed",
          "the manual run to complete")
    assert schedule(scheduled)["paused"] is True  # a trigger does not resume it
    # Paused, it fired no more by itself: three of its periods on, no firing after its last
    # but the manual one (the trigger's wait has mostly covered them).
    time.sleep(max(0.0, paused_at + 3 * EVERY_SECONDS - time.monotonic()))
    later = [f for f in schedule(scheduled)["firings"]
             if f["at"] > last_fired and f["outcome"] != "manual"]
    assert later == [], f"fired while paused: {later}"
    screenshot("schedules-triggered")


def test_a_caller_who_is_not_an_operator_is_told_why_not(
    driver: Any, scheduled: Inspector, tmp_path: Path
) -> None:
    """With bearer auth and no operators, the API answers 403: the page says so, and the
    schedule is as it was."""
    scheduled.api("POST", "/sweep").raise_for_status()  # stores it, if no test did yet
    with bearer_api(scheduled, tmp_path, operators="") as reader:
        before = schedule(scheduled)["paused"]
        driver.get(f"{reader.url}/ui#/schedules")
        driver.find_element(By.ID, "token").send_keys(BEARER_TOKEN, Keys.ENTER)
        wait_for(driver, row, "the schedule's row, read with the token")
        click(driver, f"{ROW} button.toggle")
        wait_for(driver, lambda d: "operators" in text_of(d, "#schedule-action"),
                 "the API's refusal on the page")
        assert "error" in driver.find_element(By.ID, "schedule-action").get_attribute("class")
        assert schedule(scheduled)["paused"] == before
        answer = reader.api("POST", f"/schedules/{SCHEDULE_ID}/trigger")
        assert answer.status_code == 403, answer.text

