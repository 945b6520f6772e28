"""The per-delivery model step CPU benchmark: its windows, ratios and side-by-side table, and
one short run through the real engine on the Firestore emulator."""

from __future__ import annotations

import asyncio
import gc
import os

import pytest

from ackloop_dev.bench.step_cpu import _measure, ratios, render, summary, turn_means


@pytest.mark.parametrize(("cpu", "turns", "window", "expected"), [
    # A window from the turn on; at the run's end it shifts back to hold `window` steps.
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], (0, 2, 5), 2, {0: 1.5, 2: 3.5, 5: 5.5}),
    # A turn the run does not have is left out; a window wider than the run takes all of it.
    ([2.0, 4.0], (0, 7), 5, {0: 3.0}),
    ([3.0], (0,), 1, {0: 3.0}),
])
def test_a_turns_cpu_is_the_mean_of_its_window(cpu: list[float], turns: tuple[int, ...],
                                               window: int, expected: dict[int, float]) -> None:
    assert turn_means(cpu, turns, window) == expected


def test_ratios_are_to_turn_zero_and_need_it() -> None:
    assert ratios({0: 4.0, 25: 5.0, 50: 6.2}) == {0: 1.0, 25: 1.25, 50: 1.55}
    assert ratios({25: 5.0}) == {}


def test_the_summary_takes_the_median_over_runs_and_the_table_shows_each_side() -> None:
    runs = [[2.0, 2.0, 3.0, 3.0], [2.0, 2.0, 4.0, 4.0], [2.0, 2.0, 9.0, 9.0]]
    found = summary(runs, (0, 2), 2)
    assert found["cpu_ms"] == {0: 2.0, 2: 4.0}
    assert found["ratio"] == {0: 1.0, 2: 2.0}
    assert found["ratio_by_run"] == [{0: 1.0, 2: 1.5}, {0: 1.0, 2: 2.0}, {0: 1.0, 2: 4.5}]
    assert found["cpu_ms_least"] == {0: 2.0, 2: 3.0} and found["ratio_least"][2] == 1.5
    table = render({"before": found, "after": summary(runs[:1], (0, 2), 2)}, (0, 2), 2)
    assert "4.00 (x2.00)" in table and "3.00 (x1.50)" in table
    assert table.splitlines()[1].split() == ["turn", "before", "after"]
    assert "before: least over runs 0: 2.00 ms (x1.00), 2: 3.00 ms (x1.50)" in table


@pytest.mark.skipif(not (os.environ.get("FIRESTORE_EMULATOR_HOST")
                         and os.environ.get("PUBSUB_EMULATOR_HOST")),
                    reason="needs the Firestore and Pub/Sub emulators")
def test_a_short_run_is_timed_at_every_model_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACKLOOP_PROJECT_ID", "GOOGLE_CLOUD_PROJECT", "ACKLOOP_COLLECTION_PREFIX",
                 "ACKLOOP_MODEL_PROVIDER", "ACKLOOP_LOG_LEVEL", "ACKLOOP_AGENTS"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the test
    try:
        (run,), (decisions,) = asyncio.run(_measure(7, 1))
    finally:
        gc.unfreeze()  # the benchmark freezes its process's objects, as a deployed one does
    assert len(run) == len(decisions) == 4  # 7 steps: model turns 0..3
    assert all(ms > 0 for ms in run)
    assert all(ms > 0 for ms in decisions)  # the scripted model decided every turn
