"""What a model quota adds to a model step that does not wait, on the in-process engine: one
read and one write of its shard for a quota of requests, and one more write (the answer's
tokens) for a quota of tokens; a deployment without a quota writes no quota document."""

from __future__ import annotations

from ackloop_dev.bench.quota_cost import QUOTAS, added, run


async def test_a_gated_step_adds_at_most_two_writes_and_an_ungated_one_none() -> None:
    found = await run(runs=6, calls=3)
    steps = found["per_model_step"]
    assert {s["model_steps"] for s in steps.values()} == {18}  # the same work each time
    more = found["added_per_gated_step"]
    assert (more["rpm"]["docs_written"], more["rpm"]["docs_read"]) == (1.0, 1.0)
    assert more["rpm"]["round_trips"] == 2.0
    assert 1.0 < more["rpm+tpm"]["docs_written"] <= 2.0
    assert set(QUOTAS) == {"no quota", "rpm", "rpm+tpm"}


def test_added_is_the_difference_per_step_without_the_step_count() -> None:
    assert added({"model_steps": 4, "docs_written": 3.5, "round_trips": 5.0},
                 {"model_steps": 4, "docs_written": 2.25, "round_trips": 3.0}) == {
        "docs_written": 1.25, "round_trips": 2.0}
