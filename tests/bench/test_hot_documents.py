"""The limiters' documents at a full quota, on the in-process engine: what each kind is
written per model call, and the busiest second and minute of any one of them."""

from __future__ import annotations

import argparse

import pytest

from ackloop_dev.bench.hot_documents import busiest, measure


@pytest.mark.parametrize(("times", "span", "most"), [
    ([], 1.0, 0),
    ([0.0, 0.5, 0.99, 1.0, 1.5], 1.0, 3),  # 0.0..0.99; a second on, 1.0 starts a new one
    ([0.0, 30.0, 59.0, 61.0, 62.0], 60.0, 4),
])
def test_busiest_counts_the_most_within_any_span(times: list[float], span: float,
                                                 most: int) -> None:
    assert busiest(times, span) == most


async def test_each_model_call_writes_its_shard_twice_its_slots_twice_and_its_budget_once(
        ) -> None:
    found = await measure(argparse.Namespace(rpm=60, runs=30, calls=2, spread=30.0, tenants=3,
                                             concurrency=2, usd=1000.0))
    calls = found["model_calls"]
    assert calls == 30 * 2
    documents = found["documents"]
    # The reservation and the tokens' correction; a slot taken and given back (a step that
    # waits for its place writes none); the call's cost added to its tenant's budget.
    assert documents["quotas"]["writes"] == 2 * calls
    assert documents["slots"]["writes"] == 2 * calls and documents["slots"]["documents"] == 3
    assert documents["spend"]["writes"] == calls and documents["spend"]["documents"] == 3
    assert found["minutes"] >= 1.0  # 60 calls at 60 a minute, less the headroom
