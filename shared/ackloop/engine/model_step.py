"""The model step: one Gemini call per delivery of a model step message, at most once.

1. Claim the step (its key is ``{turn}-model``), or run it unclaimed where the claim rule says
   (:mod:`ackloop.engine.claims`; a streamed call then claims at its first text); a completed
   step only re-sends its outbox.
2. Check the run: cancelled, out of budget, or ended by a final tool result -> end the run.
3. Build the contents: the conversation's transcript, plus this turn's input (the user's text
   on turn 0, else the previous turn's tool results, in call order).
4. Call the model with the lease kept alive, and decide (:func:`decide`, a pure function):
   one tool step per call, or the run's end.
5. Commit the decision (:func:`ackloop.engine.step_commit.commit`), then publish.

The reads and the claim of step 1 are :mod:`ackloop.engine.model_inputs`'s, the call of step 4
:mod:`ackloop.engine.model_call`'s.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any

from ackloop import files
from ackloop.agents.agent import Agent
from ackloop.domain.errors import (
    ModelPermanentError,
    PermanentError,
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
from ackloop.engine import (
    children,
    compaction,
    concurrency,
    outbox_sending,
    quota,
    spend_limits,
)
from ackloop.engine.deps import Deps
from ackloop.engine.handoff import turn_agent
from ackloop.engine.lease import (
    ClaimRef,
    LimiterWait,
    RequestScope,
    prepare_tools,
    released_on_failure,
)
from ackloop.engine.model_call import call_model
from ackloop.engine.model_inputs import Inputs, claim_and_read, turn_input
from ackloop.engine.step_commit import Basis, Decision, commit, run_end
from ackloop.engine.structured import OutputContract, contract_for, judge
from ackloop.model.base import (
    ModelRequest,
    ModelTurn,
)
from ackloop.store import Claim, RunRead, Transcript
from ackloop.store.deltas import run_delta_write
from ackloop.telemetry import tracing
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
    # for a person's decision or an event, asleep, or while its children slept or waited
    # (``_credited``), is not the run's own.
    if (deps.clock.now() - (run.started_at or run.created_at) - run.waited_seconds
            > limits.max_seconds):
        return StopReason.MAX_SECONDS
    if limits.max_tokens is not None and usage.total_tokens >= limits.max_tokens:
        return StopReason.MAX_TOKENS
    return None


async def handle_model_step(deps: Deps, message: ModelStepMessage, scope: RequestScope) -> None:
    key = StepKey.model(message.turn)
    read = await claim_and_read(deps, message, key, scope)
    if read is None:
        return  # the run has ended: nothing to run
    message, run_read, claim, inputs = read
    if claim.state == "completed":
        if outbox_sending.sends_again(claim.step, scope.message_id, scope.redriven):
            await outbox_sending.resend(deps, message.run_id, claim.step.outbox)
        return
    ref = ClaimRef(claim)
    try:
        async with released_on_failure(deps.store, deps.clock, ref):
            try:
                await _run_claimed(deps, message, ref, run_read, inputs, scope)
            finally:
                await concurrency.give_back_held(deps, ref)
    except PermanentError as exc:
        # Before the transcript could be read (or it is inconsistent): end the run as it is.
        log.warning("run %s failed at %s: %s", message.run_id, key, exc)
        await commit(deps, ref, _failure(exc, message.usage, []), Basis(run_read),
                     kind="model", rolls_up=inputs.previous)


@dataclass
class _Turn:
    """A claimed model step's working state: what it read and what a compaction made of it.
    A compaction (an earlier delivery's, or this one's) changes the transcript the step builds
    on and the usage it counts, so the pieces of :func:`_run_claimed` share them here."""

    run_read: RunRead
    transcript: Transcript
    scheduled: ModelStepMessage
    """The message as the ledger scheduled it (before any compaction is counted)."""
    ctx: TurnContext
    compacted: compaction.Compacted | None

    @property
    def basis(self) -> Basis:
        return Basis(self.run_read, self.transcript)

    def compacted_now(self, made: compaction.Compacted) -> None:
        """Build on ``made``'s transcript from now on, and count its calls."""
        self.compacted, self.transcript = made, made.transcript
        self.ctx = replace(self.ctx, message=compaction.counted(self.scheduled, made))


async def _run_claimed(
    deps: Deps, message: ModelStepMessage, ref: ClaimRef, run_read: RunRead,
    inputs: Inputs, scope: RequestScope,
) -> None:
    claim = ref.claim
    run = run_read.record
    if run.status is not RunStatus.RUNNING:
        # Ended (or not started): this step does not apply, so it is not recorded either.
        if claim.state != "unclaimed":
            await deps.store.steps.release_step(claim, error=f"not run: the run is {run.status}")
        return
    run, run_fields = _credited(run, inputs.previous, scope.waited_since, deps.clock.now())
    agent = deps.agents.get(turn_agent(run, message.turn, inputs.previous))
    tracing.note(agent=agent.name)
    transcript = await _transcript(deps, run, message, inputs)
    new_contents, final_output = turn_input(run, message, inputs.previous)
    if message.turn == 0:
        new_contents = [*await _answers_left_by_the_previous_run(deps, transcript), *new_contents]
    # A compaction an earlier delivery of this step committed: counted by whatever this one
    # records (an answer, a stop, a failure), never made again.
    compacted = compaction.made_by_this_step(run, message.turn, transcript)
    state = _Turn(run_read, transcript, message,
                  TurnContext(run, compaction.counted(message, compacted), agent, new_contents),
                  compacted)
    try:
        stop = _stop_before_call(deps, state.ctx, claim, final_output)
        contract = contract_for(run.output_schema, agent.output)
        tools: list[JsonDict] = []
        if stop is None:
            await prepare_tools(deps, ref, agent.tools)  # an MCP server's listing, once
            tools = agent.tools.declarations()
            if contract:
                tools = [*tools, contract.declaration()]
            decision = await _in_slots(deps, ref, state, tools, contract, scope,
                                       inputs.previous, final_output)
        else:
            decision = _stopped(stop, state.ctx.message, new_contents, final_output)
    except PermanentError as exc:
        log.warning("run %s failed at %s: %s", run.run_id, claim.key, exc)
        decision = _failure(exc, state.ctx.message.usage, new_contents)
    except LimiterWait as wait:  # acknowledged: its wake delivers it again
        await _wait_for_limiter(deps, ref, state.scheduled, scope, wait)
        return
    decision = replace(_annotated(decision, state.compacted, agent.name, run.agent),
                       run_fields=run_fields)
    turn_ctx = state.ctx
    await commit(deps, ref, decision, state.basis, kind="model", rolls_up=inputs.previous,
                 redecide=lambda fresh: _cancelled(decision, fresh, turn_ctx))


async def _wait_for_limiter(deps: Deps, ref: ClaimRef, scheduled: ModelStepMessage,
                            scope: RequestScope, wait: LimiterWait) -> None:
    """The step waits for its place under its model's quota, or for a concurrency slot: what
    it holds is given back, and its wake armed (:mod:`ackloop.engine.quota`,
    :mod:`ackloop.engine.concurrency`)."""
    since = scope.waited_since if scope.waited_since is not None else deps.clock.now()
    if isinstance(wait, quota.QuotaWait):
        await quota.wait_for_place(deps, ref.claim, scheduled, wait, since)
        return
    if isinstance(wait, spend_limits.SpendWait):
        await spend_limits.wait_for_period(deps, ref.claim, scheduled, wait, since)
        return
    assert isinstance(wait, concurrency.SlotWait)
    await deps.store.steps.give_back(ref.claim)
    await concurrency.wait_for_slot(deps, "model_steps", scheduled.model_dump(mode="json"),
                                    scheduled.run_id, ref.claim.key, wait, since)


def _credited(run: RunRecord, previous: list[StepRecord], waited_since: float | None = None,
              now: float = 0.0) -> tuple[RunRecord, JsonDict]:
    """``run`` with the time its clock did not count while the previous turn waited for
    children (their sleeps, their waits for people: :func:`children.idle_seconds`) and while
    this step waited for its place under its model's quota (since ``waited_since``: the wait is
    the deployment's, not the run's), and the fields this step writes for it (none for a step
    that waited for neither)."""
    idle, ended = children.idle_seconds(run, previous)
    if waited_since is not None:
        idle += max(0.0, now - max(waited_since, run.wait_ended_at, ended))
        ended = max(ended, now)
    if idle <= 0:
        return run, {}
    fields: JsonDict = {"waited_seconds": run.waited_seconds + idle,
                        "wait_ended_at": max(run.wait_ended_at, ended)}
    return run.model_copy(update=fields), fields


def _stop_before_call(deps: Deps, ctx: TurnContext, claim: Claim,
                      final_output: Any) -> StopReason | None:
    """Why the step ends its run without calling the model, if it does: a budget, a cancel,
    a final tool result. Raises :class:`PermanentError` when the step has been attempted too
    often, or a budget ran out while it kept failing."""
    if claim.step.attempts > deps.settings.max_step_attempts:
        raise PermanentError(
            f"step {claim.key} was attempted {claim.step.attempts - 1} times; last error: "
            f"{claim.step.last_error}",
            reason="step_attempts_exhausted",
        )
    stop = budget_stop(deps, ctx.run, ctx.message)
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
    return stop


async def _in_slots(deps: Deps, ref: ClaimRef, state: _Turn, tools: list[JsonDict],
                    contract: OutputContract | None, scope: RequestScope,
                    previous: list[StepRecord], final_output: Any) -> Decision:
    """The step's paid calls (a compaction's summary, if it compacts, and its own), made in the
    slots of its concurrency limits, kept while they run: a summary is a model call of the step
    like its own, and a limit of N model steps at once counts it. A step that will not compact
    takes its place under its model's quota (and meets its spend limits) before its slots: one
    that waits for its place touches no slot document; one whose place came but whose slot did
    not gives the place back."""
    ctx = state.ctx
    since = scope.waited_since if scope.waited_since is not None else deps.clock.now()
    limits = concurrency.limits_of(deps, ctx.run, "model", ctx.agent.name)
    placed = None
    if limits and (state.compacted is not None or not _over(state, previous)):
        placed = await _placed(deps, ref, state, tools, scope, previous)
    try:
        await concurrency.take_for(deps, ref, ctx.run, limits, "model_steps",
                                   state.scheduled.model_dump(mode="json"), since)
    except concurrency.SlotWait:
        if placed is not None:
            await quota.give_back(deps, placed.held)
        raise
    async with concurrency.kept(deps, ref.slots, f"{ctx.run.run_id}/{ref.claim.key}"):
        if placed is None:
            stop = await _compacted_if_over(deps, ref, state, tools, previous,
                                            scope.waited_since)
            if stop is not None:
                return _stopped(stop, state.ctx.message, ctx.new_contents, final_output)
            placed = await _placed(deps, ref, state, tools, scope, previous)
        return await _asked(deps, ref, state, placed, contract, scope)


def _over(state: _Turn, previous: list[StepRecord]) -> bool:
    """Whether the step's request would be over its agent's context policy (it compacts)."""
    ctx = state.ctx
    return ctx.agent.context.over(compaction.estimated_tokens(
        ctx.agent, state.transcript, ctx.new_contents, previous))


async def _compacted_if_over(deps: Deps, ref: ClaimRef, state: _Turn, tools: list[JsonDict],
                             previous: list[StepRecord], since: float | None
                             ) -> StopReason | None:
    """Compact first when the agent's context policy says the call would be over its limit
    (and no delivery of this step compacted yet); then the step budget, which counts the
    summary's call before this one, may stop the run. ``since``: when the step began to wait
    for the summary's place, if it did."""
    ctx = state.ctx
    if state.compacted is not None or not _over(state, previous):
        return None
    made = await compaction.compact(deps, ref, ctx.run, ctx.message.turn, ctx.agent,
                                    state.transcript, tools, since=since)
    if made is None:
        return None
    state.compacted_now(made)
    return budget_stop(deps, ctx.run, state.ctx.message)


@dataclass(frozen=True)
class _Placed:
    """The step's request and the tools it declares, the spend budgets it fits and its place
    under its model's quota (None: no quota applies)."""

    request: ModelRequest
    tools: list[JsonDict]
    budgets: list[spend_limits.Budget]
    held: quota.Held | None


async def _placed(deps: Deps, ref: ClaimRef, state: _Turn, tools: list[JsonDict],
                  scope: RequestScope, previous: list[StepRecord]) -> _Placed:
    """The step's request, within its spend limits and at its place under its model's quota
    (raising their waits when it is not)."""
    ctx = state.ctx
    request = await _request(deps, ctx.run, ctx.agent, state.transcript, ctx.new_contents,
                             tools)
    holder = f"{ctx.run.run_id}/{ref.claim.key}"
    limited = deps.limits.model_quotas or deps.limits.spend_limits
    tokens = _input_tokens(request, state, previous) if limited else 0  # none reads them
    budgets = await spend_limits.checked(deps, ctx.run, ctx.agent.name, request.model, tokens)
    held = await quota.take_place(deps, ctx.run, holder, request, scope.waited_since, tokens)
    return _Placed(request, tools, budgets, held)


async def _asked(deps: Deps, ref: ClaimRef, state: _Turn, placed: _Placed,
                 contract: OutputContract | None, scope: RequestScope) -> Decision:
    """The model's answer to the step's request, decided (:func:`decide`). Gemini refusing
    the request as too long compacts it (keeping the last model turn only) and asks once
    more; a second refusal fails the run with its cause."""
    ctx = state.ctx
    request, tools, budgets, held = placed.request, placed.tools, placed.budgets, placed.held
    holder = f"{ctx.run.run_id}/{ref.claim.key}"
    try:
        answered = await call_model(deps, ref, request, scope, held)
    except ModelPermanentError as exc:
        if exc.reason != "model_input_too_long":
            raise
        forced = await compaction.compact(deps, ref, ctx.run, ctx.message.turn, ctx.agent,
                                          state.transcript, tools, force=True)
        if forced is None:
            raise
        log.info("run %s: %s was too long for the model; compacted, trying once more",
                 ctx.run.run_id, ref.claim.key)
        state.compacted_now(forced.after(state.compacted))
        request = await _request(deps, ctx.run, ctx.agent, state.transcript,
                                 ctx.new_contents, tools)
        held = await quota.take_place(deps, ctx.run, f"{holder}#compacted", request)
        answered = await call_model(deps, ref, request, scope, held)
    model_turn, call_seconds, retried, last_text = answered
    await spend_limits.spent(deps, budgets, request.model, model_turn.usage)
    decision = decide(state.ctx, model_turn, contract, call_seconds)
    if last_text is not None:
        decision = replace(decision, writes=(run_delta_write(
            deps.store, ctx.run.run_id, last_text, deps.clock.now()),))
    if retried:  # the step record shows what was waited out inside this request
        decision = replace(
            decision, result=(decision.result or {}) | {"model_retries": len(retried)},
            error=f"retried in the request: {retried[-1]}")
    return decision


def _input_tokens(request: ModelRequest, state: _Turn, previous: list[StepRecord]) -> int:
    """The request's input tokens as a quota and a budget reserve them: after a model step of
    the run on the same transcript, what Gemini counted for that step's request and answer plus
    this turn's new contents by estimate, at the bytes per token it counted
    (:func:`ackloop.engine.quota.turn_tokens`: most of a long request is counted exactly); else
    the whole request by estimate (:func:`ackloop.engine.quota.request_tokens`)."""
    step = next((s for s in previous if s.kind == "model"), None)
    counted = step.usage if step is not None else None
    same_agent = step is not None and (step.result or {}).get(
        "agent", state.ctx.run.agent) == state.ctx.agent.name
    if (counted is None or counted.prompt_tokens <= 0 or state.compacted is not None
            or not same_agent):
        return quota.request_tokens(request)
    return quota.turn_tokens(counted, request, state.transcript.view_bytes,
                             state.ctx.new_contents)


def _annotated(decision: Decision, compacted: compaction.Compacted | None, agent: str,
               run_agent: str) -> Decision:
    """``decision`` with what the step's compaction cost (its cost in the step's, its tokens
    in the run's usage) and, on a hand-off's turn, whose turn it was (the ledger says so)."""
    if compacted is not None:
        decision = replace(decision, compaction_cost=compacted.cost,
                           result=(decision.result or {}) | {"compaction": compacted.record})
    if agent != run_agent:
        decision = replace(decision, result=(decision.result or {}) | {"agent": agent},
                           end=(decision.end.model_copy(update={"agent": agent})
                                if decision.end else None))
    return decision


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
        transcript = await deps.store.transcript.load_transcript_view(run.conversation_id)
    if transcript.chunks and transcript.chunks[-1].compacted_into is not None:
        # A delivery of a step compacted and died after its commit (rare): read on from there.
        transcript = await deps.store.transcript.past_compactions(transcript)
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
    steps = await deps.store.steps.get_steps(previous_run, keys)
    pairs = [
        (call, (step.result or {}).get("response", conversation.NOT_EXECUTED)
         if step is not None and step.status is StepStatus.COMPLETED
         else conversation.NOT_EXECUTED)
        for call, step in zip(calls, steps, strict=True)
    ]
    return [conversation.function_responses(pairs)]


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
