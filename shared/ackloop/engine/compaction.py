"""Compaction: a model step whose request would pass its agent's context budget first replaces
the older turns with a summary (:mod:`ackloop.domain.context_window`).

The summary is one model call, committed before the step's own call as the transcript's next
chunk (:meth:`ackloop.store.Transcripts.commit_compaction`), created once and fenced on the
last chunk as read. So it is recorded once whatever is redelivered or killed:

* killed during the summary's call, nothing was written: the redelivery summarizes again;
* killed after its commit, the redelivery finds the chunk, made by this very step (its
  ``compaction.by``), before it calls anything, and goes on from it: no second summary;
* two deliveries at once: a step that will compact claims before anything is called (the
  claim rule of :mod:`ackloop.engine.claims` does not apply to it), so the second waits for the
  first inside its request and acknowledges once the step is recorded; one summary, one
  recorded step. A step that comes to compact unclaimed all the same (Gemini refused its
  request as too long) claims before its summary (:func:`claim_before_summary`);
* a delivery that took over an expired lease while the first still runs: the second's commit
  is refused (the chunk exists, the last chunk's fence moved), and it reads the first's
  chunk and uses it (its own summary is dropped unrecorded).

The summary's request is the agent's own (its instructions, its tools with calls turned off,
the history as its requests sent it) followed by the request for the summary, so Gemini's
implicit cache serves the prefix it shares with the step's previous request. A summary is a
model call: the run's usage counts it, and so does its ``max_steps`` budget; it takes its place
under the model's quota and fits its spend limits first, in the step's concurrency slots
(:func:`_summarized`).

The step that made (or found) it counts its usage in the run's and its cost in the step's
(:attr:`ackloop.store.Decision.compaction_cost`), and names it in its result
(``compaction``): the chunk also keeps both, so the ledger has them even for a delivery killed
before the step's own commit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ackloop import files
from ackloop.agents.agent import Agent
from ackloop.domain.context_window import (
    cut_index,
    json_size,
    summary_content,
    summary_request_contents,
    tokens_of_bytes,
)
from ackloop.domain.cost import Cost, Spend, price
from ackloop.domain.errors import (
    ModelPermanentError,
    ModelRetryableError,
    RetryableError,
    StaleRead,
)
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunRecord, StepRecord, TranscriptChunk
from ackloop.domain.wire import ModelStepMessage, Usage
from ackloop.engine import quota, spend_limits
from ackloop.engine.deps import Deps
from ackloop.engine.lease import ClaimRef, heartbeat
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.store import CHUNK_BYTES, Transcript
from ackloop.telemetry import metrics, tracing
from ackloop.transcript import conversation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Compacted:
    """A compaction a model step made or found: the transcript as the step now reads it, and
    what the summary's call used and cost."""

    transcript: Transcript
    usage: Usage
    cost: Cost
    record: JsonDict
    """What the step's result says of it."""

    def after(self, earlier: Compacted | None) -> Compacted:
        """This compaction, made after ``earlier`` in the same step: both used and cost."""
        if earlier is None:
            return self
        usage = earlier.usage.plus(self.usage)
        return Compacted(self.transcript, usage, earlier.cost.plus(self.cost),
                         self.record | {"compactions": 2,
                                        "usage": usage.model_dump(mode="json")})


def counted(message: ModelStepMessage, compacted: Compacted | None) -> ModelStepMessage:
    """``message`` (as the ledger scheduled it) with its compaction's tokens in the run's
    usage: every decision of the step carries them on (the next step, or the run's end)."""
    if compacted is None:
        return message
    return message.model_copy(update={"usage": message.usage.plus(compacted.usage)})


def made_by_this_step(run: RunRecord, turn: int, transcript: Transcript) -> Compacted | None:
    """The compaction this very step made, where the transcript as read already starts at it
    (read after an earlier delivery committed it): counted, not made again."""
    if not transcript.chunks:
        return None
    chunk = transcript.chunks[transcript.start]
    if (chunk.compaction or {}).get("by") != f"{run.run_id}/{StepKey.model(turn)}":
        return None
    return _made_by(str(chunk.compaction["by"]) if chunk.compaction else "",
                    (chunk, transcript.last_version), transcript.conversation_id,
                    transcript=Transcript(transcript.conversation_id,
                                          transcript.chunks[transcript.start:],
                                          transcript.last_version,
                                          transcript.expires[transcript.start:]))


def estimated_tokens(agent: Agent, transcript: Transcript, new_contents: list[JsonDict],
                     previous: list[StepRecord]) -> int:
    """The input tokens of the request a model step is about to make.

    After a model step of the same run, Gemini's own count of that step's request plus its
    answer and this turn's new contents (in bytes / 4): exact for what was counted, and it
    costs nothing to read. Else (a run's first turn) bytes / 4 of the transcript's view as its
    chunks recorded it, the new contents, the instructions and the tools."""
    added = json_size(new_contents) if new_contents else 0
    model_step = next((s for s in previous if s.kind == "model"), None)
    if model_step is not None and model_step.usage.prompt_tokens > 0:
        counted = model_step.usage
        return counted.prompt_tokens + counted.output_tokens + tokens_of_bytes(added)
    fixed = len(agent.instructions.encode()) + json_size(agent.tools.declarations())
    return tokens_of_bytes(transcript.view_bytes + added + fixed)


async def compact(deps: Deps, ref: ClaimRef, run: RunRecord, turn: int, agent: Agent,
                  transcript: Transcript, tools: list[JsonDict], *,
                  force: bool = False, since: float | None = None) -> Compacted | None:
    """Compact ``transcript`` for model step ``turn`` of ``run`` (see the module docstring);
    None when its view has too little to summarize. ``tools``: the declarations the step's
    own request sends (the summary's request starts as the agent's do). ``force`` (Gemini
    refused the request as too long): keep only the last model turn, whatever the policy
    keeps. The summary is a paid call like the step's own: it takes its place under the
    model's quota and fits its spend limits first (raising their wait; ``since``: when the step
    began to wait, if it did)."""
    policy = agent.context
    view = transcript.view
    keep = 1 if force else policy.keep_recent_turns
    cut = cut_index(view, keep, 0 if force else policy.min_summarized_turns)
    if cut is None or not transcript.chunks:
        return None
    cut = _fitting(view, cut)
    by = f"{run.run_id}/{StepKey.model(turn)}"
    conversation_id = transcript.conversation_id
    following = transcript.chunks[-1].index + 1
    found = await deps.store.transcript.read_chunk(conversation_id, following)
    if found is not None:
        return _made_by(by, found, conversation_id)
    await claim_before_summary(deps, ref)
    model = policy.summarizer or agent.model or run.model
    kind = "forced-summary" if force else "summary"
    async with heartbeat(deps.store, deps.clock, ref, deps.settings.lease_seconds) as beat:
        for halving in range(SUMMARY_HALVINGS + 1):
            request = ModelRequest(
                model=model, agent=agent.name, system_instruction=agent.instructions,
                tools=tools, calls_allowed=False,
                contents=await files.for_request(deps.files, summary_request_contents(
                    conversation.answer_dangling_calls(view[:cut]),
                    policy.summary_instructions)),
                timeout_seconds=deps.settings.model_timeout_seconds)
            try:
                answer = await _summarized(deps, run, agent.name,
                                           f"{by}#{kind}{halving or ''}", request, since)
                break
            except ModelPermanentError as exc:
                # What is to be summarized is itself past the model's input limit: summarize
                # its older half (at a model turn), and keep the rest as it is.
                earlier = _half(view, cut)
                if exc.reason != "model_input_too_long" or earlier is None or (
                        halving == SUMMARY_HALVINGS):
                    raise
                log.info("run %s: the summary of %d content(s) was too long for %s; "
                         "summarizing the first %d", run.run_id, cut, model, earlier)
                cut = earlier
    beat.check()
    summary = (answer.text or "").strip()
    if not summary:
        log.warning("run %s: the summary of %d content(s) came back empty; the request goes "
                    "uncompacted", run.run_id, cut)
        return None
    usage = answer.usage
    cost = price(Spend(model=model, prompt_tokens=usage.prompt_tokens,
                       output_tokens=usage.output_tokens, cached_tokens=usage.cached_tokens,
                       vcpu=deps.settings.service_vcpu,
                       memory_gib=deps.settings.service_memory_gib))
    record: JsonDict = {
        "by": by, "chunk": following, "model": model, "summarized": cut,
        "kept": len(view) - cut, "summary_bytes": len(summary.encode()),
        "kept_bytes": json_size(view[cut:]),
        "usage": usage.model_dump(mode="json"), "cost": cost.model_dump(mode="json"),
        "at": deps.clock.now()}
    try:
        compacted = await deps.store.transcript.commit_compaction(
            transcript, summary, view[cut:], record, deps.clock.now(),
            opening=summary_content(summary))
    except StaleRead:
        # The last chunk changed: another delivery of this step compacted first (its commit
        # moved the fence too; whether a store names the chunk's create or the fence, the
        # chunk tells), or a run's end outside a step, or a cancel, wrote the fence: then the
        # redelivery reads the run again and ends (or drops) the step as it finds it.
        compacted = None
    if compacted is None:
        # Another delivery of this step made it first (or the transcript moved on).
        again = await deps.store.transcript.read_chunk(conversation_id, following)
        if again is None:
            raise RetryableError(f"the transcript of {conversation_id} changed while it was "
                                 "being compacted", retry_after=1.0)
        return _made_by(by, again, conversation_id)
    metrics.model_tokens(model, usage.prompt_tokens, usage.output_tokens)
    log.info("run %s: %s compacted %d content(s) into a summary of %d bytes, kept %d",
             run.run_id, by, cut, record["summary_bytes"], record["kept"])
    return Compacted(compacted, usage, cost, _step_record(record))


async def _summarized(deps: Deps, run: RunRecord, agent: str, holder: str,
                      request: ModelRequest, since: float | None) -> ModelTurn:
    """The summary's call, under the limits a model call of the run meets: its spend limits
    checked and its place under the model's quota taken first, a 429 turned into a wait for a
    new place (:mod:`ackloop.engine.quota`), what it cost added to its budgets after."""
    tokens = quota.request_tokens(request)
    budgets = await spend_limits.checked(deps, run, agent, request.model, tokens)
    held = await quota.take_place(deps, run, holder, request, since, tokens)
    try:
        with tracing.span("gemini.generate_content", {"gen_ai.request.model": request.model,
                                                      "ackloop.compaction": True}) as call:
            answer = await deps.model.generate(request)
            tracing.model_answered(call, answer.usage.prompt_tokens,
                                   answer.usage.output_tokens, answer.model_version)
    except ModelRetryableError as exc:
        if held is not None and exc.quota_exhausted:
            raise await quota.refused(deps, held, exc.retry_after) from exc
        raise
    await quota.answered(deps, held, answer.usage.prompt_tokens)
    await spend_limits.spent(deps, budgets, request.model, answer.usage)
    return answer


async def claim_before_summary(deps: Deps, ref: ClaimRef) -> None:
    """Claim a step that runs unclaimed before its summary's call (its document created with
    a lease, as an eager claim makes it). A summary is the dearest call a step makes, and two
    deliveries that compacted at once both paid for one and raced for the chunk; claimed, a
    concurrent duplicate waits for the holder or finds the step taken. Raises
    :class:`~ackloop.domain.errors.LeaseLost` when another delivery claimed or recorded the step
    first: this delivery has lost it and makes no call."""
    if ref.claim.version is not None:
        return
    ref.claim = await deps.store.steps.claim_unclaimed(ref.claim, now=deps.clock.now(),
                                                       lease_seconds=deps.settings.lease_seconds)
    tracing.note(claim=ref.claim.state, attempt=ref.claim.step.attempts)
    tracing.event("claim before compaction", attempt=ref.claim.step.attempts)


SUMMARY_HALVINGS = 4
"""How often a summary's request that the model refuses as too long is halved."""


def _half(view: list[JsonDict], cut: int) -> int | None:
    """A cut before a model turn about half as far in as ``cut`` (None: there is none)."""
    models = [i for i, c in enumerate(view) if c.get("role") == "model" and 0 < i < cut]
    if not models:
        return None
    return min(models, key=lambda i: abs(i - cut // 2))


def _fitting(view: list[JsonDict], cut: int) -> int:
    """``cut``, moved to a later model turn while the kept turns' copy would not fit in a
    chunk beside its summary (a quarter of the chunk left for it)."""
    room = CHUNK_BYTES * 3 // 4
    models = [i for i, c in enumerate(view) if c.get("role") == "model" and i >= cut]
    for candidate in models:
        if json_size(view[candidate:]) <= room:
            return candidate
    return models[-1] if models else cut


def _made_by(by: str, found: tuple[TranscriptChunk, Any], conversation_id: str,
             transcript: Transcript | None = None) -> Compacted:
    """The compaction ``by`` made, as found in the chunk after the transcript read; a chunk
    that another step made means the transcript moved on since it was read (retryable)."""
    chunk, version = found
    record = chunk.compaction or {}
    if chunk.summary is None or record.get("by") != by:
        raise RetryableError(f"the transcript of {conversation_id} moved on since it was read "
                             f"(chunk {chunk.index} by {record.get('by')!r})", retry_after=1.0)
    log.info("%s: found its compaction (chunk %d), made by an earlier delivery", by, chunk.index)
    if transcript is None:
        transcript = Transcript(conversation_id, [chunk], version)
    return Compacted(transcript, Usage.model_validate(record.get("usage") or {}),
                     Cost.model_validate(record.get("cost") or {}), _step_record(record))


def _step_record(record: JsonDict) -> JsonDict:
    """What the step's result says of its compaction."""
    return {key: record[key] for key in ("chunk", "model", "summarized", "kept",
                                         "summary_bytes", "kept_bytes", "usage")
            if key in record}
