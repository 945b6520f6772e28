"""Per-step engine overhead of ackloop runs, from their step documents.

Every step document records ``completed_at`` (taken right after the model or tool call
returned, before the commit) and ``call_seconds`` (the call itself). For a step and the step it
triggered, the engine's overhead between them is::

    next.completed_at - next.call_seconds - step.completed_at

that is, from the end of one call to the start of the next, with the model/tool time removed:
the commit, the publish, the push delivery, the claim and the loading of the next step's inputs.
It is the same span Temporal's activity ledger measures (one activity's end to the next one's
start). All timestamps come from this machine's clock.

The step's claim time (``started_at``, taken as its delivery claims it) splits that span in two
(:func:`split_gaps`): *to the claim* (the previous step's commit, its publish, the Pub/Sub
delivery and the request's decoding) and *claim to call* (the claim and the reads of the step's
inputs, inside the function).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ackloop.domain.records import StepRecord
from ackloop.store import AgentStore


def _call_end(step: StepRecord) -> float | None:
    return step.completed_at


def _call_start(step: StepRecord) -> float | None:
    if step.completed_at is None:
        return None
    return step.completed_at - (step.call_seconds or 0.0)


def step_gaps(steps: Sequence[StepRecord]) -> list[float]:
    """Seconds of engine overhead between each step and the step that triggered it.

    A model step of turn t > 0 is triggered by the last tool step of turn t - 1 to finish; a
    tool step of turn t by the model step of turn t.
    """
    return [to_claim + in_step for to_claim, in_step in split_gaps(steps)]


def split_gaps(steps: Sequence[StepRecord]) -> list[tuple[float, float]]:
    """Each step gap as (trigger's call end -> claim, claim -> call start), in seconds."""
    models = {s.turn: s for s in steps if s.kind == "model"}
    tools: dict[int, list[StepRecord]] = {}
    for s in steps:
        if s.kind == "tool":
            tools.setdefault(s.turn, []).append(s)
    gaps: list[tuple[float, float]] = []
    for step in steps:
        start = _call_start(step)
        if start is None:
            continue
        if step.kind == "tool":
            triggers = [models[step.turn]] if step.turn in models else []
        else:
            triggers = tools.get(step.turn - 1, [])
        ends = [e for t in triggers if (e := _call_end(t)) is not None]
        if ends:
            claimed = min(max(step.started_at, max(ends)), start)
            gaps.append((claimed - max(ends), start - claimed))
    return gaps


def call_seconds(steps: Sequence[StepRecord]) -> float:
    """Model and tool time of a run."""
    return sum(s.call_seconds or 0.0 for s in steps)


async def load_steps(
    store: AgentStore, run_ids: Sequence[str], parallel: int = 32
) -> dict[str, list[StepRecord]]:
    """Every step of each run, ``parallel`` runs at a time."""
    gate = asyncio.Semaphore(parallel)

    async def one(run_id: str) -> tuple[str, list[StepRecord]]:
        async with gate:
            return run_id, await store.list_steps(run_id)

    return dict(await asyncio.gather(*(one(r) for r in run_ids)))
