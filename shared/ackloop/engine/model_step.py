"""The model step: one Gemini call per delivery of a model step message, at most once.

1. Claim the step (its key is ``{turn}-model``), or run it unclaimed where the claim rule says
   (:mod:`ackloop.engine.claims`; a streamed call then claims at its first text); a completed
   step only re-sends its outbox.
2. Check the run: cancelled, out of budget, or ended by a final tool result -> end the run.
3. Build the contents: the conversation's transcript, plus this turn's input (the user's text
   on turn 0, else the previous turn's tool results, in call order).
4. Call the model with the lease kept alive, and decide (:func:`decide`, a pure function):
   one tool step per call, or the run's end.
5. Commit the decision (:func:`ackloop.engine.commit.commit`), then publish.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from ackloop import files
from ackloop.config.agents import Agent
from ackloop.domain.errors import (
    ModelPermanentError,
    ModelRetryableError,
    PermanentError,
    RetryableError,
)
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import (
    Outgoing,
    RunRecord,
    RunStatus,
    StepRecord,
    StepStatus,
    StopReason,
)
from ackloop.domain.wire import FunctionCall, ModelStepMessage, ToolStepMessage, Usage
from ackloop.engine import claims, compaction, outbox
from ackloop.engine.commit import Basis, Decision, commit, run_end
from ackloop.engine.deps import Deps
from ackloop.engine.handoff import turn_agent
from ackloop.engine.lease import (
    ClaimAtFirstText,
    ClaimRef,
    RequestScope,
    claim_in_run,
    heartbeat,
    prepare_tools,
    released_on_failure,
)
from ackloop.engine.ledger import scheduled_model_step
from ackloop.engine.structured import OutputContract, contract_for, judge
from ackloop.model.base import (
    ModelClient,
    ModelRequest,
    ModelTurn,
    StreamingModelClient,
)
from ackloop.store import Claim, ModelStepInputs, RunRead, Transcript
from ackloop.store.deltas import DeltaRecord, DeltaWriter
from ackloop.store.outgoing import parse_reads
from ackloop.telemetry import tracing
from ackloop.telemetry.context import update_log_context
from ackloop.transcript import conversation

log = logging.getLogger(__name__)



_RUN_BUDGETS = frozenset({StopReason.MAX_STEPS, StopReason.MAX_SECONDS, StopReason.MAX_TOKENS})


def budget_stop(deps: Deps, run: RunRecord, message: ModelStepMessage) -> StopReason | None:
    """The reason to stop before calling the model, if any."""
    limits, usage = run.limits, message.usage
    if run.cancel_requested:
        return StopReason.CANCELLED
    # Every model call so far: one a turn, a compaction's summaries, and the child runs'
    # (their part of ``usage``) -- a child spends from what its parent has left.
    if usage.model_calls >= limits.max_steps:
        return StopReason.MAX_STEPS
    # Wall clock from when the run became active: time waiting in its conversation's queue,
    # or for a person's decision, is not the run's own.
    if (deps.clock.now() - (run.started_at or run.created_at) - run.waited_seconds
            > limits.max_seconds):
        return StopReason.MAX_SECONDS
    if limits.max_tokens is not None and usage.total_tokens >= limits.max_tokens:
        return StopReason.MAX_TOKENS
    return None


def tool_results(turn: int, call_count: int, steps: list[StepRecord]) -> list[StepRecord]:
    """The completed tool steps of ``turn`` in call order; retryable if any is missing."""
    tools = sorted((s for s in steps if s.kind == "tool" and s.turn == turn), key=lambda s: s.index)
    done = [s for s in tools if s.status == "completed"]
    if len(done) < call_count:
        raise RetryableError(
            f"turn {turn}: {len(done)} of {call_count} tool results recorded", retry_after=1.0
        )
    return done[:call_count]


@dataclass(frozen=True)
class Inputs:
    """What a model step reads besides the run: the transcript (None: not read yet) and, after
    turn 0, the previous turn's steps (its model step and tool results)."""

    transcript: Transcript | None
    previous: list[StepRecord]


async def handle_model_step(deps: Deps, message: ModelStepMessage, scope: RequestScope) -> None:
    key = StepKey.model(message.turn)
    read = await _claim_and_read(deps, message, key, scope)
    if read is None:
        return  # the run has ended: nothing to run
    message, run_read, claim, inputs = read
    if claim.state == "completed":
        await outbox.resend(deps, message.run_id, claim.step.outbox)
        return
    ref = ClaimRef(claim)
    try:
        async with released_on_failure(deps.store, deps.clock, ref):
            await _run_claimed(deps, message, ref, run_read, inputs, scope)
    except PermanentError as exc:
        # Before the transcript could be read (or it is inconsistent): end the run as it is.
        log.warning("run %s failed at %s: %s", message.run_id, key, exc)
        await commit(deps, ref, _failure(exc, message.usage, []), Basis(run_read),
                     kind="model", rolls_up=inputs.previous)


async def _claim_and_read(
    deps: Deps, message: ModelStepMessage, key: StepKey, scope: RequestScope
) -> tuple[ModelStepMessage, RunRead, Claim, Inputs] | None:
    """Read the step's inputs, check that the ledger scheduled it, then claim it or run it
    unclaimed (:mod:`ackloop.engine.claims`), in as few round trips as possible. Returns the
    message as the ledger scheduled it (its usage is the ledger's), or None when the run is not
    running (nothing is claimed).

    Turn 0 reads the run and the step's own document. Later turns read the previous turn's
    steps and this step's document in one range (the previous turn must have scheduled this
    step: :class:`~ackloop.engine.ledger.Unscheduled` otherwise); the previous model step
    recorded where the transcript stands, so the run and the transcript chunks then come in one
    read (the chunks are listed only for a step recorded without it). Nothing is written before
    these checks pass.
    """
    wait_until = scope.wait_until(deps, deps.settings.model_timeout_seconds)
    run_id = message.run_id
    transcript: Transcript | None = None
    found: RunRead | None
    previous: list[StepRecord] = []
    if message.turn == 0:
        message = scheduled_model_step(message, {})
        found, (own,) = await deps.store.run_and_steps(run_id, [str(key)])
        if found is not None and found.record.new_conversation:
            # The run created its conversation: nothing is in its transcript before this step
            # (follow-ups wait in the conversation's queue until the run ends).
            transcript = Transcript(found.record.conversation_id, [])
    elif (hinted := await _read_as_hinted(deps, message, scope)) is not None:
        found, previous, own, transcript = (hinted.run, hinted.previous, hinted.own,
                                            hinted.transcript)
        message = scheduled_model_step(message, {s.key: s for s in previous})
    else:
        turn = message.turn - 1
        in_range = await deps.store.steps_in_range(run_id, str(StepKey.model(turn)), str(key))
        own = next((s for s in in_range if s.key == str(key)), None)
        previous = [s for s in in_range if s.key != str(key)]
        message = scheduled_model_step(message, {s.key: s for s in previous})
        model_step = next((s for s in previous if s.kind == "model"), None)
        pointer = (model_step.result or {}).get("transcript") if model_step else None
        if isinstance(pointer, dict):
            found, transcript = await deps.store.run_and_transcript(run_id, pointer)
        else:
            found = await deps.store.read_run(run_id)
    message = with_children(message, previous)
    unclaimed = False
    if own is None and found is not None and found.record.status is RunStatus.RUNNING:
        if transcript is None or transcript.conversation_id != found.record.conversation_id:
            transcript = await deps.store.load_transcript_view(found.record.conversation_id)
        if recorded_since(transcript, run_id, message.turn):
            # A duplicate delivery recorded this step between the read of its document and
            # this read of the transcript: the call is not made again (on a context that
            # already holds its answer). As for a duplicate whose commit loses (StepTaken),
            # nothing is sent: the delivery that recorded the step sends its outbox.
            log.info("run %s: step %s was recorded by another delivery", run_id, key)
            return None
        prompt_bytes = transcript.view_bytes + len(found.record.text)
        # A streamed call that starts unclaimed claims at its first text (ClaimAtFirstText).
        unclaimed = (not claims.model_call_claims(deps.settings, found.record.model,
                                                  prompt_bytes)
                     and not _compacts(deps, found.record, message, transcript, previous))
    claimed = await claim_in_run(deps, run_id, found, key, "model", message_id=scope.message_id,
                                 wait_until=wait_until, unclaimed=unclaimed,
                                 attempt=scope.delivery_attempt)
    if claimed is None:
        return None
    run_read, claim = claimed
    if run_read is not found:
        transcript = None  # the claim waited: read the transcript again
    return message, run_read, claim, Inputs(transcript, previous)


def _compacts(deps: Deps, run: RunRecord, message: ModelStepMessage, transcript: Transcript,
              previous: list[StepRecord]) -> bool:
    """Whether the step will compact before its call (its agent's policy, on the estimate the
    step makes again once claimed): such a step claims, since its summary is the dearest call
    a step makes, and a concurrent duplicate should wait for it rather than pay for another."""
    agent = deps.agents.get(turn_agent(run, message.turn, previous))
    try:
        new_contents, _ = _turn_input(run, message, previous)
    except RetryableError:
        return False  # the step will not call anything yet
    return agent.context.over(compaction.estimated_tokens(agent, transcript, new_contents,
                                                          previous))


def with_children(message: ModelStepMessage, previous: list[StepRecord]) -> ModelStepMessage:
    """``message`` with what the child runs of the previous turn's calls used added to its
    usage, to the totals and to the children's part (``previous``: the previous turn's steps,
    as read). Each sub-agent's call records its child's usage on its step
    (:attr:`~ackloop.store.Decision.child_usage`); the ledger's message counts the turn's
    calls only, so every delivery of this step counts the children alike, from what it read."""
    usage = message.usage
    for step in previous:
        if step.kind == "tool" and step.turn == message.turn - 1:
            usage = usage.plus(step.usage.children_part())
    return message if usage == message.usage else message.model_copy(update={"usage": usage})


def recorded_since(transcript: Transcript, run_id: str, turn: int) -> bool:
    """Whether ``transcript`` already holds the model turn ``turn`` of ``run_id`` (or a later
    one): a step whose own document was read missing just before was recorded meanwhile."""
    owner, _, key = (transcript.tail or "").partition("/")
    if owner != run_id:
        return False
    try:
        return StepKey.parse(key).turn >= turn
    except ValueError:
        return False


async def _read_as_hinted(deps: Deps, message: ModelStepMessage, scope: RequestScope
                          ) -> ModelStepInputs | None:
    """A later turn's inputs in one round trip, where the message's ``reads`` hint names them
    and what is read bears it out (:meth:`~ackloop.store.AgentStore.model_step_inputs`); None
    otherwise (the inputs are then read in two)."""
    hint = parse_reads(scope.reads)
    if hint is None:
        return None
    calls, pointer = hint
    return await deps.store.model_step_inputs(message.run_id, message.turn, calls, pointer)


async def _run_claimed(
    deps: Deps, message: ModelStepMessage, ref: ClaimRef, run_read: RunRead,
    inputs: Inputs, scope: RequestScope,
) -> None:
    claim = ref.claim
    run = run_read.record
    if run.status is not RunStatus.RUNNING:
        # Ended (or not started): this step does not apply, so it is not recorded either.
        if claim.state != "unclaimed":
            await deps.store.release_step(claim, error=f"not run: the run is {run.status}")
        return
    agent = deps.agents.get(turn_agent(run, message.turn, inputs.previous))
    tracing.note(agent=agent.name)
    transcript = await _transcript(deps, run, message, inputs)
    new_contents, final_output = _turn_input(run, message, inputs.previous)
    if message.turn == 0:
        new_contents = [*await _answers_left_by_the_previous_run(deps, transcript), *new_contents]
    basis = Basis(run_read, transcript)
    # A compaction an earlier delivery of this step committed: counted by whatever this one
    # records (an answer, a stop, a failure), never made again.
    compacted = compaction.made_by_this_step(run, message.turn, transcript)
    scheduled = message
    message = compaction.counted(scheduled, compacted)
    turn_ctx = TurnContext(run, message, agent, new_contents)
    try:
        if claim.step.attempts > deps.settings.max_step_attempts:
            raise PermanentError(
                f"step {claim.key} was attempted {claim.step.attempts - 1} times; last error: "
                f"{claim.step.last_error}",
                reason="step_attempts_exhausted",
            )
        stop = budget_stop(deps, run, message)
        if stop in _RUN_BUDGETS and claim.step.attempts > 1 and claim.step.last_error:
            # The budget ran out while this very step kept failing: that failure, not the
            # budget, is why the run has no answer, and the run says so.
            raise PermanentError(
                f"the run's {stop} budget ran out while step {claim.key} was being retried "
                f"({claim.step.attempts - 1} failed attempt(s)); last error: "
                f"{claim.step.last_error}",
                reason="retries_outlasted_budget",
            )
        if stop is None and final_output is not None:
            stop = StopReason.FINAL_TOOL
        contract = contract_for(run.output_schema, agent.output)
        tools: list[JsonDict] = []
        if stop is None:
            await prepare_tools(deps, ref, agent.tools)  # an MCP server's listing, once
            tools = agent.tools.declarations()
            if contract:
                tools = [*tools, contract.declaration()]
            if compacted is None and agent.context.over(compaction.estimated_tokens(
                    agent, transcript, new_contents, inputs.previous)):
                compacted = await compaction.compact(deps, ref, run, message.turn, agent,
                                                     transcript, tools)
                if compacted is not None:
                    transcript, basis = compacted.transcript, Basis(run_read,
                                                                    compacted.transcript)
                    message = compaction.counted(scheduled, compacted)
                    turn_ctx = replace(turn_ctx, message=message)
                    # A summary is a model call: the step budget counts it before this one.
                    stop = budget_stop(deps, run, message)
        if stop is not None:
            decision = _stopped(stop, message, new_contents, final_output)
        else:
            request = await _request(deps, run, agent, transcript, new_contents, tools)
            try:
                model_turn, call_seconds, retried, last_text = await _call_model(
                    deps, ref, request, scope)
            except ModelPermanentError as exc:
                # Gemini refused the request as too long: compact (keeping the last model turn
                # only) and try once more; a second refusal fails the run with its cause.
                if exc.reason != "model_input_too_long":
                    raise
                forced = await compaction.compact(deps, ref, run, message.turn, agent,
                                                  transcript, tools, force=True)
                if forced is None:
                    raise
                log.info("run %s: %s was too long for the model; compacted, trying once more",
                         run.run_id, claim.key)
                compacted = forced.after(compacted)
                transcript, basis = forced.transcript, Basis(run_read, forced.transcript)
                message = compaction.counted(scheduled, compacted)
                turn_ctx = replace(turn_ctx, message=message)
                request = await _request(deps, run, agent, transcript, new_contents, tools)
                model_turn, call_seconds, retried, last_text = await _call_model(
                    deps, ref, request, scope)
            decision = decide(turn_ctx, model_turn, contract, call_seconds)
            if last_text is not None:
                decision = replace(decision, deltas=(last_text,))
            if retried:  # the step record shows what was waited out inside this request
                decision = replace(
                    decision, result=(decision.result or {}) | {"model_retries": len(retried)},
                    error=f"retried in the request: {retried[-1]}")
    except PermanentError as exc:
        log.warning("run %s failed at %s: %s", run.run_id, claim.key, exc)
        decision = _failure(exc, message.usage, new_contents)
    if compacted is not None:  # its cost in the step's, its tokens in the run's (message)
        decision = replace(decision, compaction_cost=compacted.cost,
                           result=(decision.result or {}) | {"compaction": compacted.record})
    if agent.name != run.agent:  # a hand-off's turn: the ledger says whose it was
        end = decision.end and decision.end.model_copy(update={"agent": agent.name})
        decision = replace(decision, result=(decision.result or {}) | {"agent": agent.name},
                           end=end)
    await commit(deps, ref, decision, basis, kind="model", rolls_up=inputs.previous,
                 redecide=lambda fresh: _cancelled(decision, fresh, turn_ctx))


def _stopped(stop: StopReason, message: ModelStepMessage, new_contents: list[JsonDict],
             final_output: Any) -> Decision:
    """The decision of a step that ends its run without calling the model (a budget, a
    cancel, a final tool result)."""
    answer = _as_text(final_output) if final_output is not None else None
    return Decision(result={"stop_reason": stop.value}, contents=new_contents,
                    end=run_end(stop, message.usage, output=final_output, answer=answer))


async def _request(deps: Deps, run: RunRecord, agent: Agent, transcript: Transcript,
                   new_contents: list[JsonDict], tools: list[JsonDict]) -> ModelRequest:
    """The model call of a step: the agent's instructions and tools, the transcript's view
    (from its last compaction on) and this turn's new contents."""
    return ModelRequest(
        model=agent.model or run.model,
        agent=agent.name,
        system_instruction=agent.instructions,
        contents=await files.for_request(deps.files, conversation.answer_dangling_calls(
            [*transcript.view, *new_contents])),
        tools=tools,
        timeout_seconds=deps.settings.model_timeout_seconds,
    )


async def _call_model(
    deps: Deps, ref: ClaimRef, request: ModelRequest, scope: RequestScope
) -> tuple[ModelTurn, float, list[str], DeltaRecord | None]:
    """Call the model with the lease kept alive, waiting out retryable errors in the request
    while the wait is short (``retry_wait_seconds``) and the call still fits before the
    request's deadline; a longer wait releases the step to Pub/Sub's redelivery.

    A streamed call that fails after some of its text was shown is retried the same way, but
    under the step's next attempt, taken in the store first (:meth:`Heartbeat.next_attempt`):
    the new number tells clients to drop the failed call's text, and it counts toward
    ``max_step_attempts`` (the last attempt is left to the redelivery, which fails the run).
    A streamed call of a step that runs unclaimed claims it at its first text
    (:class:`ClaimAtFirstText`); one that shows none stays unclaimed.

    Returns the turn, the seconds spent, the retryable errors waited out, and the call's last
    text not written yet (:meth:`DeltaWriter.finish`), which the step's commit writes."""
    started = time.monotonic()
    backoff = 1.0
    retried: list[str] = []
    async with heartbeat(deps.store, deps.clock, ref, deps.settings.lease_seconds) as beat:
        while True:
            lazy = (ClaimAtFirstText(deps.store, deps.clock, ref, beat,
                                     deps.settings.lease_seconds)
                    if _streams(deps) and ref.claim.version is None else None)
            deltas = _delta_writer(deps, ref, lazy)
            try:
                with tracing.span("gemini.generate_content",
                                  {"gen_ai.request.model": request.model}) as call:
                    turn, last_text = await _generate(deps.model, request, deltas, lazy)
                    tracing.model_answered(call, turn.usage.prompt_tokens,
                                           turn.usage.output_tokens, turn.model_version)
                break
            except ModelRetryableError as exc:
                wait = exc.retry_after if exc.retry_after is not None else backoff
                room = scope.deadline - deps.clock.now() - deps.settings.model_timeout_seconds
                shown = deltas is not None and deltas.shown
                last = ref.claim.step.attempts >= deps.settings.max_step_attempts
                if (wait > min(deps.settings.retry_wait_seconds, room) or beat.lost
                        or (shown and last)):
                    raise
                retried.append(f"{type(exc).__name__}: {exc}")
                if shown:
                    await beat.next_attempt(retried[-1])
                    update_log_context(attempt=ref.claim.step.attempts)
                log.info("model call for %s: %s; trying again in %.1f s", ref.claim.key, exc,
                         wait)
                tracing.event("model retry", error=retried[-1][:500], wait_seconds=wait,
                              attempt=ref.claim.step.attempts)
                await deps.clock.sleep(wait)
                backoff = min(backoff * 2, 8.0)
    beat.check()
    return turn, time.monotonic() - started, retried, last_text


def _streams(deps: Deps) -> bool:
    """Whether model calls stream: the deployment asks for it and the model can."""
    return deps.settings.model_stream and isinstance(deps.model, StreamingModelClient)


def _delta_writer(deps: Deps, ref: ClaimRef, lazy: ClaimAtFirstText | None
                  ) -> DeltaWriter | None:
    """Where a model call's text goes while it runs, when the deployment streams and the model
    can; None for a unary call. A step not claimed yet hands its first delta to ``lazy``, which
    commits it with the step's claim, and writes the others under that claim's attempt."""
    if not _streams(deps):
        return None
    claim = ref.claim
    return deps.store.delta_writer(claim.run_id, claim.key, claim.step.attempts,
                                   flush_seconds=deps.settings.stream_flush_seconds,
                                   now=deps.clock.now(),
                                   ready=lazy.attempt if lazy is not None else None,
                                   claim=lazy.start if lazy is not None else None)


async def _generate(model: ModelClient, request: ModelRequest, deltas: DeltaWriter | None,
                    lazy: ClaimAtFirstText | None = None
                    ) -> tuple[ModelTurn, DeltaRecord | None]:
    """One model call: streamed into ``deltas`` when given, else unary. Returns the turn and,
    streamed, its last text not written yet: the step's commit writes it, so every delta of
    a step is written by the time the step is, and a client sees them before the step's
    event. With ``lazy``, the step is claimed at the call's first text
    (:class:`ClaimAtFirstText`)."""
    if deltas is None or not isinstance(model, StreamingModelClient):
        return await model.generate(request), None
    try:
        if lazy is None:
            turn = await model.generate_streaming(request, deltas.add)
        else:
            turn = await lazy.call(model.generate_streaming(request, deltas.add))
    except BaseException:
        await deltas.abandon()
        raise
    return turn, await deltas.finish()


@dataclass(frozen=True)
class TurnContext:
    """What a model step's decision depends on besides the model's answer."""

    run: RunRecord
    message: ModelStepMessage
    agent: Agent
    new_contents: list[JsonDict]


def decide(
    ctx: TurnContext, turn: ModelTurn, contract: OutputContract | None, call_seconds: float
) -> Decision:
    """What a model turn produces: the next steps, or the run's end. Pure."""
    run, message, new_contents = ctx.run, ctx.message, ctx.new_contents
    usage = message.usage.plus(turn.usage)
    model_turn = conversation.model_content(turn.parts)
    made = Decision(result=_step_result(turn), contents=[*new_contents, model_turn],
                    step_usage=turn.usage, call_seconds=call_seconds)
    verdict = judge(contract, turn) if contract else None
    if verdict is not None and verdict.feedback is not None:
        # Not an acceptable final answer: the model hears why on its next turn.
        return replace(made, result=(made.result or {}) | {"feedback": True},
                       outbox=_next_model_step(run, message.turn, usage),
                       contents=[*made.contents, verdict.feedback])
    if verdict is not None:
        answer = turn.text or json.dumps(verdict.output, ensure_ascii=False)
        return replace(made, end=run_end(StopReason.ANSWERED, usage, answer=answer,
                                         output=verdict.output))
    if not turn.calls:
        return replace(made, end=run_end(StopReason.ANSWERED, usage, answer=turn.text or ""))
    if usage.tool_calls + len(turn.calls) > run.limits.max_tool_calls:
        # The model's request is kept on the step, but not in the transcript: the next turn
        # of the conversation must not see calls that were never answered.
        return replace(made, contents=new_contents, end=run_end(StopReason.MAX_TOOL_CALLS, usage))
    return replace(made, outbox=_tool_messages(run, ctx.agent, message.turn, turn.calls, usage))


def _cancelled(decision: Decision, fresh: RunRecord, ctx: TurnContext) -> Decision:
    """The decision again after the run changed while the model ran: a cancel wins over a
    fan-out (the turn's tool results are kept; its unanswered calls are not)."""
    if not fresh.cancel_requested or decision.end is not None:
        return decision
    usage = ctx.message.usage.plus(decision.step_usage or Usage())
    return replace(decision, outbox=[], contents=ctx.new_contents,
                   end=run_end(StopReason.CANCELLED, usage))


def _failure(exc: PermanentError, usage: Usage, contents: list[JsonDict]) -> Decision:
    """A permanent failure ends the run; the previous turn's tool results still go into the
    transcript, so the conversation's next run knows those calls were made."""
    error = f"{exc.reason}: {exc}"
    return Decision(result={"error": error}, contents=contents, error=error,
                    end=run_end(StopReason.FAILED, usage, error=error))


async def _transcript(
    deps: Deps, run: RunRecord, message: ModelStepMessage, inputs: Inputs
) -> Transcript:
    """The conversation so far, checked to end at the previous model step of this run."""
    transcript = inputs.transcript
    if transcript is None or transcript.conversation_id != run.conversation_id:
        transcript = await deps.store.load_transcript_view(run.conversation_id)
    if transcript.chunks and transcript.chunks[-1].compacted_into is not None:
        # A delivery of a step compacted and died after its commit (rare): read on from there.
        transcript = await deps.store.past_compactions(transcript)
    if message.turn == 0:
        return transcript
    expected = f"{run.run_id}/{StepKey.model(message.turn - 1)}"
    if transcript.tail != expected:
        raise PermanentError(
            f"transcript of {run.conversation_id} ends at {transcript.tail!r}, expected "
            f"{expected!r}",
            reason="transcript_inconsistent",
        )
    return transcript


async def _answers_left_by_the_previous_run(
    deps: Deps, transcript: Transcript
) -> list[JsonDict]:
    """The responses to calls the conversation's previous run asked for but never answered in
    the transcript (it ended in between: a dead letter, a cancel, a budget, the sweeper), read
    from that run's ledger: a call whose tool step completed gets its real result, so the model
    never reads "not executed" for a call that ran (and a side-effecting tool is not asked for
    again); the others are answered as not executed. Appended with this run's first turn."""
    view = transcript.view  # a compaction's chunk alone holds its last content in ``kept``
    last = view[-1] if view else None
    if last is None or last.get("role") != "model" or not transcript.tail:
        return []
    calls = conversation.calls_in(last)
    previous_run, _, key = transcript.tail.partition("/")
    try:
        asked_at = StepKey.parse(key)
    except ValueError:
        return []
    if not calls or asked_at.kind != "model":
        return []
    keys = [str(StepKey.tool(asked_at.turn, i)) for i in range(len(calls))]
    steps = await deps.store.get_steps(previous_run, keys)
    pairs = [
        (call, (step.result or {}).get("response", conversation.NOT_EXECUTED)
         if step is not None and step.status is StepStatus.COMPLETED
         else conversation.NOT_EXECUTED)
        for call, step in zip(calls, steps, strict=True)
    ]
    return [conversation.function_responses(pairs)]


def _turn_input(
    run: RunRecord, message: ModelStepMessage, previous: list[StepRecord]
) -> tuple[list[JsonDict], Any]:
    """This turn's new contents, and a final tool output if a tool ended the run."""
    if message.turn == 0:
        return [conversation.user_content(run.text, run.files)], None
    model_step = next(s for s in previous if s.kind == "model")
    if (model_step.result or {}).get("feedback"):
        return [], None  # the feedback is already in the transcript
    calls = [FunctionCall.model_validate(c) for c in (model_step.result or {}).get("calls", [])]
    results = tool_results(message.turn - 1, len(calls), previous)
    pairs = [
        (call, (step.result or {}).get("response", {}))
        for call, step in zip(calls, results, strict=True)
    ]
    final = next(
        ((s.result or {}).get("response", {}).get("result") for s in results
         if (s.result or {}).get("final")),
        None,
    )
    return [conversation.function_responses(pairs)], final


def _next_model_step(run: RunRecord, turn: int, usage: Usage) -> list[Outgoing]:
    message = ModelStepMessage(run_id=run.run_id, turn=turn + 1, usage=usage)
    return [Outgoing(topic="model_steps", data=message.model_dump(mode="json"),
                     target_step=str(StepKey.model(turn + 1)))]


def _tool_messages(
    run: RunRecord,
    agent: Agent,
    turn: int,
    calls: list[FunctionCall],
    usage: Usage,
) -> list[Outgoing]:
    return [
        Outgoing(
            topic="tool_steps",
            data=ToolStepMessage(
                run_id=run.run_id,
                turn=turn,
                index=i,
                call_count=len(calls),
                call=call,
                agent=agent.name,
                usage=usage,
            ).model_dump(mode="json"),
            target_step=str(StepKey.tool(turn, i)),
        )
        for i, call in enumerate(calls)
    ]


def _step_result(turn: ModelTurn) -> JsonDict:
    return {
        "calls": [c.model_dump(mode="json") for c in turn.calls],
        "text": turn.text,
        "finish_reason": turn.finish_reason,
        "model_version": turn.model_version,
    }


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
