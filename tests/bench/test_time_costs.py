"""What a sleep adds to a run, counted on the in-process engine: its wake (two Cloud Tasks
operations: the task and its dispatch), one delivery more that records the wait and one that
the wake makes, their documents; priced above zero and nothing while asleep. What a schedule's
firing adds to the run it starts: its wake and the schedule's documents."""

from __future__ import annotations

import pytest

from ackloop_dev.bench.time_costs import Counts, measure, minus


def test_a_sleep_adds_its_wake_and_two_deliveries() -> None:
    result = measure()
    added = result["a_sleep_adds"]
    assert added["task_operations"] == 2
    assert added["messages"] == added["requests"] == 2
    assert added["docs_written"] > 0 and added["docs_read"] > 0
    assert 0 < result["a_sleep_usd"] < 0.0001
    assert result["while_asleep_usd_per_month"] == 0.0


def test_a_schedules_firing_adds_its_wake_and_its_documents_not_a_message() -> None:
    fired = measure(firings=5)["a_firing_adds"]
    assert fired["task_operations"] >= 2  # its tick's task and dispatch (and a re-arm)
    assert fired["messages"] == fired["requests"] == 0  # the tick stands for the query
    assert fired["docs_read"] > 0 and fired["docs_written"] > 0


@pytest.mark.parametrize(("counts", "usd"), [
    (Counts(), 0.0),
    (Counts(task_operations=1_000_000), 0.40),
    (Counts(docs_written=100_000), 0.09),
    (Counts(docs_read=100_000), 0.03),
])
def test_counts_are_priced_at_list_prices(counts: Counts, usd: float) -> None:
    assert counts.usd(step_cpu_s=0.0) == pytest.approx(usd)


def test_minus_takes_each_count_apart() -> None:
    assert minus(Counts(3, 4, 5, 6, 7), Counts(1, 1, 1, 1, 1)) == Counts(2, 3, 4, 5, 6)
