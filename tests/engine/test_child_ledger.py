"""No spend goes uncounted in a root's ledger, however a call that waits for its child ends.

The root's usage and cost hold every child's final figures: those of a child cancelled with
its caller or at its call's deadline (what it records after the cancel is in them), of a child
whose call was killed before it recorded its wait, and of a child whose caller ended outside a
step (a dead letter, the sweeper) before or after the child ended. In-memory engine, a manual
clock.
"""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import DEADLINE, RunRecord, RunStatus, StopReason
from ackloop.domain.wire import Usage
from ackloop.engine.ending import cancel_run, end_run_now, run_end
from ackloop.engine.sweep import sweep
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import SimulatedCrash
from tests.engine.test_children import (
    SETTINGS,
    Team,
    _planner_call_crashed,
    child_of,
    drain,
    planner_team,
    steps_of,
    team_loop,
)
from tests.engine.test_guarantees import take
from tests.engine.test_one_wait import (
    KEY,
    WAIT_SECONDS,
    advance,
    child_answers,
    ended,
    run_of,
    waiting,
)


def counts_all_of(parent: RunRecord, child: RunRecord) -> None:
    """``parent``'s figures hold ``child``'s final ones, in its children's part."""
    assert child.status.terminal and child.cost is not None, child
    assert not parent.children_ending, parent.children_ending
    assert (parent.usage.children or Usage()) == child.usage.counts(), (parent.usage, child.usage)
    assert parent.cost is not None
    assert parent.cost.children_usd == pytest.approx(child.cost.usd), (parent.cost, child.cost)


async def test_a_cancelled_childs_last_steps_count_in_its_cancelled_callers_ledger() -> None:
    """The root is cancelled while its child waits for a person: the child's steps after the
    cancel (its call answered "not run", the model step that ends it) count in the root."""
    loop, root = await waiting("child")

    await cancel_run(loop.deps, root.run_id)
    root, step = await ended(loop, root)

    child = await child_of(loop, root, KEY)
    assert root.status is RunStatus.CANCELLED and child.status is RunStatus.CANCELLED
    assert step.decision is not None and step.decision.by == "child"
    counts_all_of(root, child)


async def test_a_child_cancelled_at_its_calls_deadline_counts_its_final_figures() -> None:
    """The call's deadline cancels the child and the call takes its end, as a rejection at the
    deadline (what the model reads) with the child's final figures."""
    loop, root = await waiting("child")
    advance(loop, WAIT_SECONDS + 1)

    await sweep(loop.deps)
    root, step = await ended(loop, root)

    child = await child_of(loop, root, KEY)
    assert step.decision is not None and step.decision.by == DEADLINE, step.decision
    assert (root.answer or "").startswith("root: not run"), root.answer
    assert child.status is RunStatus.CANCELLED
    counts_all_of(root, child)


def crashing_after_the_child(loop: InProcessLoop) -> None:
    """The planner's call dies once, right after it created its child (``tool:after_child``)."""
    create_run = loop.deps.store.runs.create_run
    died: list[str] = []

    async def create_then_die(run: RunRecord, costed: Any, **options: Any) -> Any:
        found = await create_run(run, costed, **options)
        if run.parent_run_id is not None and not died:
            died.append(run.run_id)
            raise SimulatedCrash("after the child was created")
        return found

    loop.deps.store.runs.create_run = create_then_die  # type: ignore[method-assign]


async def swept(loop: InProcessLoop) -> None:
    """The sweeper's pass once the tree has been idle, and what it sends."""
    advance(loop, loop.deps.settings.sweep_stale_seconds + 1)
    await sweep(loop.deps)
    await drain(loop, take(loop))


async def test_a_child_whose_call_died_before_its_wait_is_cancelled_when_its_caller_fails(
) -> None:
    """The call died between starting its child and recording its wait; its run is then ended
    outside a step (as a sibling's dead letter does): the child is cancelled (it would run
    for nobody) and its end, after its caller's, still adds its figures to it."""
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    crashing_after_the_child(loop)
    await _planner_call_crashed(loop)
    sent = steps_of(loop, take(loop))
    parent_id = run_id_for_request("q")

    await end_run_now(loop.deps, parent_id, run_end(StopReason.FAILED, Usage(),
                                                    error="dead_lettered: a sibling"))
    await drain(loop, sent + take(loop))
    await swept(loop)  # the child's first step died with the call: the sweeper sends it

    parent = await run_of(loop, parent_id)
    child = await child_of(loop, parent, KEY)
    assert parent.status is RunStatus.FAILED
    assert child.cancel_requested and child.status is RunStatus.CANCELLED, child
    counts_all_of(parent, child)


async def test_a_call_redelivered_after_its_run_was_cancelled_takes_its_child() -> None:
    """The call died between starting its child and recording its wait, then its run was
    cancelled: its redelivery cancels the child and waits for its end, which it counts."""
    loop = team_loop(planner_team(), Team({"planner": ["ask_researcher"]}))
    crashing_after_the_child(loop)
    call = await _planner_call_crashed(loop)
    sent = steps_of(loop, take(loop))
    parent_id = run_id_for_request("q")

    await cancel_run(loop.deps, parent_id)
    advance(loop, SETTINGS.lease_seconds + 1)
    await drain(loop, [call, *sent, *take(loop)])
    await swept(loop)

    parent = await run_of(loop, parent_id)
    child = await child_of(loop, parent, KEY)
    assert parent.status is RunStatus.CANCELLED and child.status is RunStatus.CANCELLED
    counts_all_of(parent, child)


async def test_a_run_ended_outside_a_step_counts_its_working_child_when_it_ends() -> None:
    """The root is ended by a dead letter while its child waits for a person: the child is
    cancelled, the root's end waits for its figures (``children_ending``) and they are added
    once the child's end comes."""
    loop, root = await waiting("child")
    child_id = (await child_of(loop, root, KEY)).run_id

    ended_now = await end_run_now(loop.deps, root.run_id, run_end(
        StopReason.FAILED, Usage(), error="dead_lettered: its model step"))
    assert ended_now is not None and ended_now.children_ending == [child_id]
    await loop.run_until_idle()

    root = await run_of(loop, root.run_id)
    assert root.status is RunStatus.FAILED
    counts_all_of(root, await run_of(loop, child_id))


async def test_a_run_ended_outside_a_step_counts_the_end_its_child_had_reached() -> None:
    """The child has ended, its end's message lost; then the root is ended by a dead letter:
    the root counts the child's end (what its call would have taken)."""
    loop, root = await waiting("child")
    await child_answers(loop, root)  # the child's end's messages, held back

    await end_run_now(loop.deps, root.run_id, run_end(
        StopReason.FAILED, Usage(), error="dead_lettered: its model step"))

    root = await run_of(loop, root.run_id)
    child = await child_of(loop, root, KEY)
    assert child.status is RunStatus.COMPLETED
    counts_all_of(root, child)
