"""The engine's part of a step's commit: the messages it sends, what it cost, and what it
records masked.

The store writes; it builds, prices and masks nothing (:mod:`ackloop.store.decision`). The
steps room asks :func:`composer`'s function once it knows what the commit writes (a
:class:`~ackloop.store.decision.StepPlan`: how many documents, the queued run a run's end
starts): the delivery is priced by that count and by the messages it sends, so neither side
can answer alone, and the answer goes into the same commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ackloop.domain.cost import Cost
from ackloop.domain.records import Outgoing
from ackloop.engine import outbox_entries
from ackloop.store import Composed, Composer, Decision, StepPlan
from ackloop.telemetry.masking import mask_secrets

Pricer = Callable[[int, Sequence[Outgoing]], Cost]
"""What the delivery spent, priced as its commit of that many documents is made and before
that outbox is published (:func:`ackloop.engine.spend.spent`)."""


def composer(decision: Decision, *, price: Pricer, rolls_up: Sequence[Cost | None] = (),
             carried: Cost | None = None) -> Composer:
    """What a step's commit of ``decision`` records beside it.

    The outbox: the decision's messages, then a run's end's (its answer, a child's notice to
    its parent, the first step of the queued run it starts), a model step's ``reads`` hint on
    the step that follows at once, all stamped with their trace context. The cost: the
    delivery (``price``), the wait it recorded first, the compaction its model step made, a
    sub-agent's child run. A model step carries the run's cost: ``carried`` (the previous
    model step's ``run_cost``, else the run's own) plus ``rolls_up`` (the previous turn's tool
    steps' costs) plus this delivery, recorded as its ``run_cost`` and, at the run's end, as
    the run's cost. The step's error, masked (it is stored and shown)."""

    def compose(plan: StepPlan) -> Composed:
        run, end = plan.run, decision.end
        outbox = list(decision.outbox)
        if end is not None:
            outbox += outbox_entries.ends(run, end)
            if plan.next_run_id is not None:
                outbox.append(outbox_entries.first_step(plan.next_run_id, other_run=True,
                                                  trace_id=plan.next_trace))
        cost = _step_cost(plan, decision, price(plan.documents, outbox))
        total = Cost.total([carried if carried is not None else run.cost, *rolls_up, cost])
        if end is not None:
            end = end.model_copy(update={"cost": total})
        return Composed(
            outbox_entries.stamped(_hinted(outbox, plan)), cost,
            run_cost=total if plan.step.kind == "model" else None, end=end,
            error=None if decision.error is None else mask_secrets(decision.error))

    return compose


def _step_cost(plan: StepPlan, decision: Decision, delivery: Cost) -> Cost:
    """What the step cost: its delivery, and what it counts in besides."""
    cost = delivery
    if plan.step.wait_cost is not None:  # the delivery that recorded its wait
        cost = cost.plus(plan.step.wait_cost)
    if decision.compaction_cost is not None:  # the summary its model step made first
        cost = cost.plus(decision.compaction_cost)
    if decision.child_cost is not None:  # a sub-agent's call: its child run's cost
        cost = cost.plus(decision.child_cost.as_child())
    return cost


def _hinted(outbox: list[Outgoing], plan: StepPlan) -> list[Outgoing]:
    """A model step of this run that follows at once (feedback on an unacceptable final
    answer) reads the transcript this commit leaves: its message says where, so it reads it
    with its other inputs in one round trip."""
    pointer = (plan.result or {}).get("transcript")
    if pointer is None:
        return outbox
    hint = outbox_entries.reads(0, pointer)
    return [o.model_copy(update={"reads": hint})
            if o.topic == "model_steps" and o.target_run is None and o.reads is None else o
            for o in outbox]
