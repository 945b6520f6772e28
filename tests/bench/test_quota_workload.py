"""The quota workload's arithmetic: requests per minute from cumulative samples, and its figures."""

from __future__ import annotations

import pytest

from ackloop_dev.bench.quota_workload import Ended, Samples, figures, parser, per_minute


@pytest.mark.parametrize(("points", "until", "expected"), [
    ([], 59.0, []),
    ([(0.0, 0, 0), (30.0, 20, 0), (60.0, 55, 0), (90.0, 60, 0), (120.0, 118, 0)], 125.0,
     [55, 63]),
    # no sample at an edge: the last one before it counts
    ([(0.0, 0, 0), (59.5, 58, 0), (61.0, 60, 0), (119.0, 60, 0), (121.0, 61, 0)], 180.0,
     [58, 2, 1]),
    # a minute in which nothing was served
    ([(0.0, 0, 0), (60.0, 60, 0), (120.0, 60, 0), (180.0, 90, 0)], 180.0, [60, 0, 30]),
])
def test_requests_answered_in_each_whole_minute(
        points: list[tuple[float, int, int]], until: float, expected: list[int]) -> None:
    assert per_minute(points, until) == expected


def test_the_figures_count_runs_429s_minutes_and_redeliveries() -> None:
    args = parser().parse_args(["--runs", "4", "--rpm", "60", "--spread", "0"])
    ended = [Ended("a", "completed", None, 30.0), Ended("b", "completed", None, 150.0),
             Ended("c", "failed", "model call failed: retries_outlasted_budget", 170.0),
             Ended("d", "running", None, 180.0)]
    samples = Samples([(0.0, 0, 3), (60.0, 60, 12), (120.0, 60, 28), (180.0, 110, 5)])
    gemini = {"answered": 110, "faults_served": {"quota": 505}}
    push = {"subscriptions": {
        "projects/p/subscriptions/x-model-steps-push": {
            "redeliveries": 63, "answers": {"204": 100, "503": 63, "200": 4}},
        "projects/p/subscriptions/x-tool-steps-push": {"redeliveries": 0, "answers": {"204": 80}},
    }}
    found = figures(args, ended, samples, gemini, push, wall=185.0)
    assert found["runs"] == {"completed": 2, "failed": 1, "other": {"running": 1},
                             "failed_by_reason": {
                                 "model call failed: retries_outlasted_budget": 1},
                             "seconds_p50": 170.0, "seconds_p95": 180.0}
    assert found["model"] == {"answered": 110, "refused_429": 505, "429_per_answered": 4.59}
    assert found["quota_used_per_minute"] == [60, 0, 50]
    assert found["quota_used_share"] == [1.0, 0.0, 0.83]
    assert found["minutes_at_zero_while_unfinished"] == 1
    assert found["push"]["redeliveries"] == 63
    assert found["push"]["by_subscription"]["x-model-steps-push"]["non_2xx"] == {"503": 63}
    assert found["push"]["model_pushes_in_flight_max"] == 28


def test_tokens_at_minutes_takes_the_last_sample_at_each_minutes_edge() -> None:
    from ackloop_dev.bench.quota_workload import tokens_at_minutes

    points = [(0.5, 10), (59.0, 900), (61.0, 950), (119.9, 400), (121.0, 5)]
    assert tokens_at_minutes(points, 125.0) == [900, 400]
    assert tokens_at_minutes([], 60.0) == [0]
