"""A run whose call sleeps, on its page (``#/runs/<id>``) in headless Chromium: ``follow-up``
asked to follow up in 2 h sleeps 7200 s; the page says it is asleep until its wake time (the
API's ``wake_at``, in UTC to the second) and its tool step's bar shows it waiting. Cancelled
through the API, the page shows it cancelled and asleep no more."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import WAIT_S, Inspector
from tests.browser.test_inspector import open_run, text_of, wait_for, wait_status

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.browser]

SLEEP_S = 7200.0
"""What "in 2 h" asks ``follow-up``'s call to sleep."""


def asleep(inspector: Inspector, run_id: str) -> dict[str, Any]:
    """The run's call asleep (its ``waiting`` entry for ``time``), polled until the API lists
    it; fails naming the run's last state once ``WAIT_S`` has passed."""
    deadline = time.monotonic() + WAIT_S
    while True:
        run = inspector.run(run_id)
        sleeping = [w for w in run.get("waiting") or [] if w["waiting_for"] == "time"]
        if sleeping:
            return sleeping[0]
        assert run["status"] not in ("completed", "failed", "cancelled"), run
        assert time.monotonic() < deadline, f"waited {WAIT_S:g} s for the call to sleep: {run}"
        time.sleep(0.2)


def step_bar(driver: Any, step: str) -> dict[str, str] | None:
    """The timeline bar of ``step``: its status and label, read in one go."""
    found: dict[str, str] | None = driver.execute_script("""
        const bar = [...document.querySelectorAll('#timeline .bar')]
          .find(b => b.dataset.step === arguments[0]);
        return bar ? {status: bar.dataset.status, label: bar.getAttribute('aria-label')} : null;
        """, step)
    return found


def test_a_sleeping_call_shows_its_wake_time_until_the_run_is_cancelled(
    driver: Any, inspector: Inspector, screenshot: Callable[[str], Path]
) -> None:
    asked = time.time()
    run_id = inspector.start_run("follow up on A-1 in 2 h", "follow-up",
                                 f"sleep-{uuid.uuid4().hex[:8]}")
    sleeping = asleep(inspector, run_id)
    assert sleeping["tool"] == "follow_up"
    assert sleeping["args"] == {"order": "A-1", "seconds": SLEEP_S}
    wake_at: float = sleeping["wake_at"]
    assert asked + SLEEP_S - 1 <= wake_at <= time.time() + SLEEP_S + 1
    expected = f"asleep until {datetime.fromtimestamp(wake_at, UTC):%Y-%m-%d %H:%M:%S} UTC"

    open_run(driver, inspector, run_id)
    wait_status(driver, "running", "the sleeping run's view")
    status = wait_for(driver, lambda d: expected in (shown := text_of(d, "#run-status"))
                      and shown, f"#run-status to say {expected!r}")
    assert "waiting for" not in status  # nobody is waited for: it goes on by itself
    bar = wait_for(driver, lambda d: (found := step_bar(d, sleeping["step"]))
                   and found["status"] == "waiting" and found,
                   f"the step {sleeping['step']}'s bar to show it waiting")
    assert bar["label"].startswith(f"{sleeping['step']} follow_up: waiting")
    screenshot("run-asleep")

    answer = inspector.api("POST", f"/runs/{run_id}/cancel")
    assert answer.status_code in (200, 202), answer.text
    wait_for(driver, lambda _: inspector.run(run_id)["status"] == "cancelled",
             "the API to show the run cancelled")
    driver.refresh()
    wait_status(driver, "cancelled", "the cancelled run's view")
    status = text_of(driver, "#run-status")
    assert "cancelled" in status
    assert "asleep until" not in status
    assert "asleep until" not in text_of(driver, "section#run")
    assert (step_bar(driver, sleeping["step"]) or {}).get("status") != "waiting"
    screenshot("run-asleep-cancelled")
