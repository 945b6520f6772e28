"""Committing what a step decided.

A handler reads (claim, run, transcript), calls (the model or the tool), then *decides*: a
:class:`~ackloop.store.decision.Decision` says what the step produced, what the transcript gains,
which messages follow and whether the run ends. The store turns it into one atomic commit
fenced on what was read (:meth:`ackloop.store.steps.Steps.commit_step`); this module runs the
loop around it.

When a document other than the step changed, the documents are read again and the handler's
``redecide`` is asked again; a run that has ended meanwhile is left as it is and the step is
released unrecorded (it did not apply). Only then are the messages sent.

The store writes; what the commit sends, costs and records masked is composed here
(:mod:`ackloop.engine.commit_contents`) and handed to it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ackloop.domain.cost import Cost
from ackloop.domain.errors import LeaseLost, PermanentError, RetryableError, StaleRead, StepTaken
from ackloop.domain.records import Outgoing, RunRecord, StepRecord, StepStatus
from ackloop.domain.wire import Usage
from ackloop.engine import concurrency
from ackloop.engine.commit_contents import Pricer, composer
from ackloop.engine.deps import Deps
from ackloop.engine.ending import log_finished, run_end
from ackloop.engine.lease import ClaimRef
from ackloop.engine.outbox_sending import send
from ackloop.engine.spend import spent
from ackloop.store import AgentStore, Basis, Claim, Committed, Decision
from ackloop.telemetry import metrics, tracing

log = logging.getLogger(__name__)

__all__ = ["COMMIT_ATTEMPTS", "Basis", "Decision", "Redecide", "commit", "record", "run_end"]

COMMIT_ATTEMPTS = 4

Redecide = Callable[[RunRecord], Decision]


async def commit(
    deps: Deps, ref: ClaimRef, decision: Decision, basis: Basis, *, kind: str,
    redecide: Redecide | None = None, rolls_up: Sequence[StepRecord] = (),
) -> None:
    """Commit ``decision`` (see the module docstring), then send its messages.

    The step records what its delivery spent (:mod:`ackloop.engine.spend`); a model step also
    carries the run's cost: the previous model step's among ``rolls_up`` (the previous turn's
    steps), with the costs of that turn's tool steps and its own (a tool step never ends the
    run: it answers the call, and the next model step decides)."""
    claim = ref.claim
    tool_costs = [s.cost for s in rolls_up if s.kind == "tool"]
    # The run's cost as the previous model step left it (a run whose steps predate run_cost
    # kept it on the run document, which the store then reads).
    carried = next((s.run_cost for s in rolls_up if s.kind == "model"), None)
    for _ in range(COMMIT_ATTEMPTS):
        run = basis.run.record
        model = run.model if kind == "model" else None

        def price(writes: int, outbox: Sequence[Outgoing], model: str | None = model,
                  usage: Usage | None = decision.step_usage) -> Cost:
            return spent(deps, model=model, usage=usage, commit_writes=writes, outbox=outbox)

        now = deps.clock.now()
        try:
            with tracing.span("firestore.commit", {"ackloop.step": claim.key}):
                committed = await record(deps.store, claim, basis, decision, now=now,
                                         price=price, rolls_up=tool_costs, carried=carried)
        except StepTaken as taken:
            await _taken(deps, claim, taken)
            return
        except StaleRead:
            basis = await _read_again(deps, basis)
            fresh = basis.run.record
            if fresh.status.terminal:
                await deps.store.steps.release_step(
                    claim, error=f"not recorded: the run became {fresh.status} meanwhile")
                return
            if redecide is not None and decision.end is None:
                decision = redecide(fresh)
            continue
        _count(run, decision)
        # A sub-agent's call carries its child's whole cost, which the child's own steps
        # already counted in this metric: only the step's own part is added here.
        metrics.step_cost(kind, committed.cost.usd - committed.cost.children_usd)
        if committed.end is not None:
            log_finished(run, committed.end, now)
        await send(deps, run.run_id, committed.outbox)
        if committed.end is not None:  # a run's concurrency slots are its until it ends
            await concurrency.give_back_run(deps, run)
        return
    raise RetryableError(f"step {claim.key} of {claim.run_id}: documents kept changing",
                             retry_after=1.0)


async def record(store: AgentStore, claim: Claim, basis: Basis, decision: Decision, *,
                 now: float, price: Pricer, rolls_up: Sequence[Cost | None] = (),
                 carried: Cost | None = None) -> Committed:
    """One commit of ``decision``: the steps room writes it, with what
    :func:`~ackloop.engine.commit_contents.composer` makes of it (messages, cost, masked error)."""
    return await store.steps.commit_step(
        claim, basis, decision, now=now,
        compose=composer(decision, price=price, rolls_up=rolls_up, carried=carried))


async def _taken(deps: Deps, claim: Claim, taken: StepTaken) -> None:
    """An unclaimed step found recorded by another delivery: that one stands, and this one is
    acknowledged. Its outbox is not re-sent: the delivery that recorded it sends it, and is
    redelivered if it dies before it has (re-sending it here would send the next steps a
    second time while they run unclaimed). A step another delivery is still running is left
    to it (its message is redelivered if it dies), and this one is redelivered too, in case it
    was ours."""
    step = taken.step
    if isinstance(step, StepRecord) and step.status is StepStatus.COMPLETED:
        log.info("step %s of %s was recorded by another delivery; this result is dropped",
                 claim.key, claim.run_id)
        return
    raise LeaseLost(f"step {claim.key} of {claim.run_id} was claimed by another delivery")


def _count(run: RunRecord, decision: Decision) -> None:
    """Count what a step's commit recorded: the model's tokens and the run's end (the commit is
    fenced, so each is counted once whatever the deliveries); its cost is counted beside it."""
    if decision.step_usage is not None:
        metrics.model_tokens(run.model, decision.step_usage.prompt_tokens,
                             decision.step_usage.output_tokens)
    if decision.end is not None:
        metrics.run_finished(run.agent, decision.end.status.value,
                             decision.end.stop_reason.value)


async def _read_again(deps: Deps, basis: Basis) -> Basis:
    """The run (and the transcript, if ``basis`` has one) read again after a commit found them
    changed."""
    run = await deps.store.runs.read_run(basis.run.run_id)
    if run is None:
        raise PermanentError(f"run {basis.run.run_id} vanished", reason="unknown_run")
    fresh = Basis(run, None if basis.transcript is None else
                  await deps.store.transcript.load_transcript_view(
                      basis.transcript.conversation_id))
    if (basis.transcript is not None and fresh.transcript is not None
            and fresh.transcript.tail != basis.transcript.tail
            and not fresh.run.record.status.terminal):
        raise PermanentError(
            f"transcript of {fresh.transcript.conversation_id} was extended by "
            f"{fresh.transcript.tail!r} while this step ran", reason="transcript_inconsistent")
    return fresh

