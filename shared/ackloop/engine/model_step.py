"""The model step: one Gemini call per delivery of a model step message, at most once.

1. Claim the step (its key is ``{turn}-model``); a completed step only re-sends its outbox.
2. Check the run: cancelled, out of budget, or ended by a final tool result -> end the run.
3. Build the contents: the conversation's transcript, plus this turn's input (the user's text
   on turn 0, else the previous turn's tool results, in call order).
4. Call the model with the lease kept alive; commit the step, the transcript append and the
   follow-up messages (one tool step per call, or the answer) atomically; then publish.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from ackloop import conversation
from ackloop.agents import AgentDefinition
from ackloop.docdb.base import Snapshot
from ackloop.engine import outbox
from ackloop.engine.deps import Deps
from ackloop.engine.finish import finish_run
from ackloop.engine.lease import ClaimRef, claim_with_run, heartbeat, released_on_retry
from ackloop.engine.structured import contract_for, judge
from ackloop.errors import PermanentError, RetryableError, UnknownRun
from ackloop.keys import StepKey
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.records import Outgoing, RunRecord, StepRecord, StopReason
from ackloop.store import Claim, Transcript
from ackloop.wire import FunctionCall, ModelStepMessage, ToolStepMessage, Usage

log = logging.getLogger(__name__)

JsonDict = dict[str, Any]


def budget_stop(deps: Deps, run: RunRecord, message: ModelStepMessage) -> StopReason | None:
    """The reason to stop before calling the model, if any."""
    limits, usage = run.limits, message.usage
    if run.cancel_requested:
        return StopReason.CANCELLED
    if message.turn >= limits.max_steps:
        return StopReason.MAX_STEPS
    if deps.clock.now() - run.created_at > limits.max_seconds:
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


async def handle_model_step(deps: Deps, message: ModelStepMessage) -> None:
    key = StepKey.model(message.turn)
    run_snapshot, claim, inputs = await _claim_and_read(deps, message, key)
    if claim.state == "completed":
        await outbox.resend(deps, message.run_id, claim.step.outbox)
        return
    ref = ClaimRef(claim)
    try:
        async with released_on_retry(deps.store, deps.clock, ref):
            await _run_claimed(deps, message, ref, run_snapshot, inputs)
    except PermanentError as exc:
        await finish_run(
            deps,
            ref.claim,
            run_snapshot,
            stop_reason=StopReason.FAILED,
            usage=message.usage,
            error=f"{exc.reason}: {exc}",
        )
        log.warning("run %s failed at %s: %s", message.run_id, key, exc)


async def _claim_and_read(
    deps: Deps, message: ModelStepMessage, key: StepKey
) -> tuple[Snapshot, Claim, Inputs]:
    """Claim the step and read its inputs in as few round trips as possible.

    Turn 0 reads the run beside the claim. Later turns read the previous turn's steps beside
    the claim; the previous model step recorded where the transcript stands, so the run and the
    transcript chunks then come in one read (the chunks are listed only for a step recorded
    without it).
    """
    if message.turn == 0:
        run_snapshot, claim = await claim_with_run(
            deps.store, deps.clock, run_id=message.run_id, key=key, name="model",
            owner=deps.owner, lease_seconds=deps.settings.lease_seconds,
        )
        return run_snapshot, claim, Inputs(None, [])
    turn = message.turn - 1
    claim, previous = await asyncio.gather(
        deps.store.claim_step(message.run_id, key, "model", owner=deps.owner,
                              now=deps.clock.now(), lease_seconds=deps.settings.lease_seconds),
        deps.store.steps_in_range(
            message.run_id, str(StepKey.model(turn)), f"{turn:04d}-tool-999"
        ),
    )
    model_step = next((s for s in previous if s.kind == "model"), None)
    pointer = (model_step.result or {}).get("transcript") if model_step else None
    transcript: Transcript | None = None
    found: Snapshot | None
    if isinstance(pointer, dict):
        found, transcript = await deps.store.run_and_transcript(message.run_id, pointer)
    else:
        found = await deps.store.get_run_snapshot(message.run_id)
    if found is None:
        raise UnknownRun(message.run_id)
    return found, claim, Inputs(transcript, previous)


async def _run_claimed(
    deps: Deps, message: ModelStepMessage, ref: ClaimRef, run_snapshot: Snapshot, inputs: Inputs
) -> None:
    claim = ref.claim
    run = RunRecord.model_validate(run_snapshot.data)
    key = claim.key
    if run.status.terminal:
        await deps.store.complete_step(
            claim, now=deps.clock.now(), result={"skipped": f"run already {run.status}"}, outbox=[]
        )
        return
    if claim.step.attempts > deps.settings.max_step_attempts:
        raise PermanentError(
            f"step {key} was attempted {claim.step.attempts - 1} times; last error: "
            f"{claim.step.last_error}",
            reason="step_attempts_exhausted",
        )
    agent = deps.agents.get(run.agent)
    transcript = await _transcript(deps, run, message, inputs)
    new_contents, final_output = _turn_input(run, message, inputs.previous)

    stop = budget_stop(deps, run, message)
    if stop is None and final_output is not None:
        stop = StopReason.FINAL_TOOL
    tail = f"{run.run_id}/{key}"
    if stop is not None:
        await finish_run(
            deps,
            claim,
            run_snapshot,
            stop_reason=stop,
            usage=message.usage,
            output=final_output,
            answer=_as_text(final_output) if final_output is not None else None,
            transcript_writes=deps.store.append_writes(transcript, new_contents, tail),
        )
        return

    contract = contract_for(run.output_schema, agent.output_model)
    tools = agent.toolbox.declarations()
    request = ModelRequest(
        model=run.model,
        system_instruction=agent.system_instruction,
        contents=conversation.answer_dangling_calls([*transcript.contents, *new_contents]),
        tools=[*tools, contract.declaration()] if contract else tools,
        timeout_seconds=deps.settings.model_timeout_seconds,
    )
    started = time.monotonic()
    async with heartbeat(deps.store, deps.clock, ref, deps.settings.lease_seconds) as beat:
        turn = await deps.model.generate(request)
    call_seconds = time.monotonic() - started
    claim = beat.check()
    deps.faults.hit("model:after_call")

    usage = message.usage.plus(turn.usage)
    model_turn = conversation.model_content(turn.parts)
    writes = deps.store.append_writes(transcript, [*new_contents, model_turn], tail)
    result = _step_result(turn)
    verdict = judge(contract, turn) if contract else None
    if verdict is not None and verdict.feedback is not None:
        # Not an acceptable final answer: the model hears why on its next turn.
        follow_up = _next_model_step(run, message.turn, usage)
        await deps.store.complete_step(
            claim, now=deps.clock.now(), result=result | {"feedback": True}, outbox=follow_up,
            usage=turn.usage, call_seconds=call_seconds,
            extra_writes=deps.store.append_writes(
                transcript, [*new_contents, model_turn, verdict.feedback], tail),
        )
        deps.faults.hit("model:after_commit")
        await outbox.send(deps, run.run_id, follow_up)
        return
    if verdict is not None:
        await finish_run(
            deps, claim, run_snapshot, stop_reason=StopReason.ANSWERED, usage=usage,
            answer=turn.text or json.dumps(verdict.output, ensure_ascii=False),
            output=verdict.output, step_result=result, step_usage=turn.usage,
            call_seconds=call_seconds, transcript_writes=writes,
        )
        return
    if not turn.calls:
        await finish_run(
            deps,
            claim,
            run_snapshot,
            stop_reason=StopReason.ANSWERED,
            usage=usage,
            answer=turn.text or "",
            step_result=result,
            step_usage=turn.usage,
            call_seconds=call_seconds,
            transcript_writes=writes,
        )
        return
    if usage.tool_calls + len(turn.calls) > run.limits.max_tool_calls:
        # The model's request is kept on the step, but not in the transcript: the next turn
        # of the conversation must not see calls that were never answered.
        await finish_run(
            deps,
            claim,
            run_snapshot,
            stop_reason=StopReason.MAX_TOOL_CALLS,
            usage=usage,
            step_result=result,
            step_usage=turn.usage,
            call_seconds=call_seconds,
            transcript_writes=deps.store.append_writes(transcript, new_contents, tail),
        )
        return
    follow_ups = _tool_messages(run, agent, message.turn, turn.calls, usage)
    result["transcript"] = deps.store.transcript_pointer(transcript, writes)
    await deps.store.complete_step(
        claim,
        now=deps.clock.now(),
        result=result,
        outbox=follow_ups,
        usage=turn.usage,
        call_seconds=call_seconds,
        extra_writes=writes,
    )
    deps.faults.hit("model:after_commit")
    await outbox.send(deps, run.run_id, follow_ups)


async def _transcript(
    deps: Deps, run: RunRecord, message: ModelStepMessage, inputs: Inputs
) -> Transcript:
    """The conversation so far, checked to end at the previous model step of this run."""
    transcript = inputs.transcript
    if transcript is None or transcript.conversation_id != run.conversation_id:
        transcript = await deps.store.load_transcript(run.conversation_id)
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


def _turn_input(
    run: RunRecord, message: ModelStepMessage, previous: list[StepRecord]
) -> tuple[list[JsonDict], Any]:
    """This turn's new contents, and a final tool output if a tool ended the run."""
    if message.turn == 0:
        return [conversation.user_text(run.text)], None
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
    agent: AgentDefinition,
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
