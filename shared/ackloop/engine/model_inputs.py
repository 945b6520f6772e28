"""What a model step reads before its call, and the claim it makes or skips: the run, the
previous turn's steps, the step's own document and the transcript, in as few round trips as
the message's hints allow; then the claim rule (:mod:`ackloop.engine.claims`).

Split from :mod:`ackloop.engine.model_step` (which runs the claimed step): this is the read
side, and what a turn's new contents are (:func:`turn_input`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ackloop.domain.errors import RetryableError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunRecord, RunStatus, StepRecord
from ackloop.domain.wire import FunctionCall, ModelStepMessage
from ackloop.engine import claims, compaction
from ackloop.engine.deps import Deps
from ackloop.engine.handoff import turn_agent
from ackloop.engine.lease import RequestScope, claim_in_run
from ackloop.engine.ledger import scheduled_model_step
from ackloop.engine.outbox_entries import parse_reads
from ackloop.store import Claim, ModelStepInputs, RunRead, Transcript
from ackloop.transcript import conversation

log = logging.getLogger(__name__)


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


async def claim_and_read(
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
        found, (own,) = await deps.store.steps.run_and_steps(run_id, [str(key)])
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
        in_range = await deps.store.steps.steps_in_range(run_id, str(StepKey.model(turn)), str(key))
        own = next((s for s in in_range if s.key == str(key)), None)
        previous = [s for s in in_range if s.key != str(key)]
        message = scheduled_model_step(message, {s.key: s for s in previous})
        model_step = next((s for s in previous if s.kind == "model"), None)
        pointer = (model_step.result or {}).get("transcript") if model_step else None
        if isinstance(pointer, dict):
            found, transcript = await deps.store.transcript.run_and_transcript(run_id, pointer)
        else:
            found = await deps.store.runs.read_run(run_id)
    message = with_children(message, previous)
    unclaimed = False
    if own is None and found is not None and found.record.status is RunStatus.RUNNING:
        if transcript is None or transcript.conversation_id != found.record.conversation_id:
            transcript = await deps.store.transcript.load_transcript_view(
        found.record.conversation_id)
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
        new_contents, _ = turn_input(run, message, previous)
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
    and what is read bears it out (:meth:`~ackloop.store.Transcripts.model_step_inputs`); None
    otherwise (the inputs are then read in two)."""
    hint = parse_reads(scope.reads)
    if hint is None:
        return None
    calls, pointer = hint
    return await deps.store.transcript.model_step_inputs(message.run_id, message.turn, calls,
                                                         pointer)


def turn_input(
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
