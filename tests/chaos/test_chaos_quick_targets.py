"""The end of the quick chaos run (``test_chaos_quick.py`` starts it): the last test of the
session waits for it and asserts every target on the shipped numbers."""

from __future__ import annotations

import pytest

from ackloop.bus.delivery import load_policy
from ackloop_dev.chaos.report import format_report
from ackloop_dev.chaos.timing import DEFAULT_FACTOR, shipped_default
from tests.chaos.quick_run import (
    WHOLE_RUN_S,
    ChaosRun,
    shared_directory,
    started_here_or_elsewhere,
    wait_for_figures,
)

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


@pytest.mark.timeout(WHOLE_RUN_S + 60)
def test_quick_chaos_on_the_shipped_numbers_meets_every_target(
        request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> None:
    shared = shared_directory(tmp_path_factory)
    if not started_here_or_elsewhere(shared):  # its first test was not selected: start it here
        run: ChaosRun = request.getfixturevalue("quick_chaos")
        run.wait_idle()
    figures = wait_for_figures(shared)
    print(format_report(figures))

    # The shipped numbers, one factor on every duration.
    timing = figures["timing"]
    assert timing["factor"] == round(DEFAULT_FACTOR, 6)
    assert timing["max_delivery_attempts"] == load_policy().max_delivery_attempts
    assert timing["max_step_attempts"] == shipped_default("max_step_attempts")
    assert figures["lease_seconds"] == round(shipped_default("lease_seconds") * DEFAULT_FACTOR, 4)

    every, out = figures["all_runs"], figures["outcome"]
    assert every["lost"] == 0 and out["lost"] == 0
    assert every["stuck"] == 0 and out["stuck"] == 0
    assert out["ended_by_crash_or_duplicate"] == 0
    assert every["transcript_overwrites"] == 0 and every["conversation_order_problems"] == 0
    assert every["conversations_with_follow_ups"] > 0
    assert figures["recovery"]["ackloop"]["n"] > 0
    assert figures["followup"]["ok"] is True
    assert figures["storm"]["ok"] is True
    assert figures["children"]["ok"] is True
    assert figures["sleeps"]["ok"] is True
    assert figures["dead_letter"]["ok"] is True
    not_met = [t for t in figures["targets"] if not t["met"]]
    assert not not_met, not_met
