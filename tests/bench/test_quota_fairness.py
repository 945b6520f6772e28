"""One tenant's burst under a model quota, on the in-process engine: the others' calls are
served round by round with its, so their runs end about when they would have without it,
while the bursting tenant's wait grows with its own burst."""

from __future__ import annotations

from ackloop_dev.bench.quota_fairness import measure, moved, percentile


async def test_a_tenants_burst_barely_moves_the_others_runs() -> None:
    even = await measure(60, {"a": 10, "b": 10, "c": 10, "d": 10}, 3, 30.0)
    burst = await measure(60, {"a": 100, "b": 10, "c": 10, "d": 10}, 3, 30.0)
    assert all(v is not None and v <= 1.5 for v in moved(even, burst).values()), (even, burst)
    assert burst["a"]["seconds_p95"] > 2.5 * max(burst[t]["seconds_p95"] for t in "bcd")


def test_moved_and_percentile() -> None:
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 3.0 and percentile([], 0.95) == 0.0
    assert moved({"a": {"seconds_p95": 1.0}, "b": {"seconds_p95": 10.0},
                  "c": {"seconds_p95": 0.0}},
                 {"a": {"seconds_p95": 9.0}, "b": {"seconds_p95": 11.0},
                  "c": {"seconds_p95": 5.0}}) == {"b": 1.1, "c": None}
