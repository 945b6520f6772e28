"""A model step's place under its model's quota (``ACKLOOP_MODEL_QUOTAS``,
:mod:`ackloop.config.quotas`), taken before each paid call.

**Before the call** (:func:`take_place`) the step reserves the call's place in the quota's
log (:mod:`ackloop.engine.quota_log`; its arithmetic :mod:`ackloop.domain.quota`): requests and
input tokens by estimate, on the shard of its run. A place that is now lets the call go. A
later one is a wait (:class:`QuotaWait`): the step gives back what it holds (no claim, no
lease, no push slot, no process) and is acknowledged, with a wake armed at its place
(:func:`wait_for_place`): the step's own message, published then, which finds the place it
took and calls. The sweeper is the net for a wake lost. A redelivery or a duplicate finds the
place taken and never takes a second one.

**After the call** (:func:`answered`) the tokens the answer counted replace the estimate, once
(a quota that limits tokens only). **A 429 that still comes** (:func:`refused`: another client
shares the project, or Vertex AI's pool shrank) pauses the shard for its retry delay, never
less than :data:`~ackloop.domain.quota.RETRY_FLOOR_SECONDS` ("0s" is how Gemini writes a delay
under a second), lowers an adaptive quota's share, and the step waits for a new place after the
pause instead of retrying in its request.

What it costs: a model call under a quota reads and writes one shard document before its call
(two round trips), and writes it again after the call when tokens are limited; a step that
waits arms one wake. A deployment without quotas pays nothing: no read, no write.

Time waited for a place does not count against the run's ``max_seconds``: the wait is the
deployment's, not the run's (the step credits it to ``waited_seconds`` when it runs).
"""

from __future__ import annotations

import json
import logging
import zlib
from dataclasses import dataclass

from ackloop.config.quotas import ModelQuota, quota_for
from ackloop.domain.context_window import json_size
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.quota import (
    Limits,
    estimated_tokens,
    learned_tokens,
    position,
    shard_limits,
)
from ackloop.domain.records import RunRecord
from ackloop.domain.wire import ModelStepMessage, Usage
from ackloop.engine import quota_log
from ackloop.engine.deps import Deps
from ackloop.engine.lease import LimiterWait, arm_limiter_wake
from ackloop.model.base import ModelRequest
from ackloop.store import AgentStore, Claim
from ackloop.telemetry import metrics

log = logging.getLogger(__name__)

FILE_TOKENS = 300
"""A file part's input tokens, as the estimate counts them (an image is 258; a page of a PDF
about as many): its bytes are not text."""


class QuotaWait(LimiterWait):
    """The call's place under its quota is later than now: the step waits for it."""

    def __init__(self, quota_id: str, at: float, ahead: int) -> None:
        super().__init__(f"waiting for quota {quota_id}: {ahead} call(s) ahead, its place at "
                         f"{at:.3f}")
        self.quota_id, self.at, self.ahead = quota_id, at, ahead


@dataclass(frozen=True)
class Held:
    """A call's place, come: what the call's answer corrects and a 429 gives back."""

    quota: ModelQuota
    shard_id: str
    call: quota_log.Call
    at: float
    model: str = ""

    @property
    def holder(self) -> str:
        return self.call.holder

    @property
    def tokens(self) -> int:
        return self.call.tokens


def shard_id(quota: ModelQuota, run_id: str) -> str:
    """The shard a run's calls take their places on: one per run, spread by its id."""
    return f"{quota.quota_id}-{zlib.crc32(run_id.encode()) % quota.shard_count:03d}"


def call_of(run: RunRecord, holder: str, tokens: int) -> quota_log.Call:
    """A call of ``run`` asking for its place: fairness's key is the run's tenant, else its
    owner; its priority is the run's."""
    return quota_log.Call(holder, tokens, run.limits.tenant or run.owner, run.limits.priority)


def limits_of(quota: ModelQuota) -> Limits:
    """One shard's part of the quota, its headroom kept."""
    return shard_limits(quota.rpm, quota.tpm, quota.shard_count, quota.headroom)


def request_tokens(request: ModelRequest) -> int:
    """The request's input tokens, estimated: its text as JSON, a file as :data:`FILE_TOKENS`."""
    return _tokens_of({"system": request.system_instruction, "contents": request.contents,
                       "tools": request.tools})


def contents_tokens(contents: list[JsonDict]) -> int:
    """Contents' input tokens, estimated as :func:`request_tokens` does."""
    return _tokens_of(contents) if contents else 0


def turn_tokens(counted: Usage, request: ModelRequest, view_bytes: int,
                new_contents: list[JsonDict]) -> int:
    """The input tokens of a request that follows a turn the model counted (``counted``: that
    turn's request and answer, the transcript's view of ``view_bytes`` with ``request``'s
    instructions and tools): those tokens, and the new contents by estimate, scaled to the
    bytes per token the model counted (:func:`~ackloop.domain.quota.learned_tokens`)."""
    seen = counted.prompt_tokens + counted.output_tokens
    seen_bytes = (view_bytes + len(request.system_instruction.encode())
                  + (json_size(request.tools) if request.tools else 0))
    return seen + learned_tokens(contents_tokens(new_contents), seen_bytes, seen)


def _tokens_of(body: object) -> int:
    files = 0

    def text_only(value: object) -> object:
        nonlocal files
        if isinstance(value, dict):
            if "inline_data" in value or "file_data" in value:
                files += 1
                return None
            return {k: text_only(v) for k, v in value.items()}
        if isinstance(value, list):
            return [text_only(v) for v in value]
        return value

    size = len(json.dumps(text_only(body), separators=(",", ":"), default=str))
    return estimated_tokens(size) + files * FILE_TOKENS


async def take_place(deps: Deps, run: RunRecord, holder: str, request: ModelRequest,
                     since: float | None = None, tokens: int | None = None) -> Held | None:
    """The call's place under its model's quota, when it has come (None: no quota applies).
    Raises :class:`QuotaWait` when it is later. ``since``: when the step began to wait for
    it, if it did (the wait is measured); ``tokens``: its input tokens when the caller knows
    better than :func:`request_tokens`."""
    quota = quota_for(deps.limits.model_quotas, request.model)
    if quota is None:
        return None
    call = call_of(run, holder, tokens if tokens is not None else request_tokens(request))
    shard = shard_id(quota, run.run_id)
    place = await quota_log.reserve(deps.store, shard, call, limits_of(quota), deps.clock)
    now = deps.clock.now()
    if place.at > now:
        raise QuotaWait(quota.quota_id, place.at, place.ahead)
    if since is not None:
        metrics.quota_waited(quota.quota_id, max(0.0, now - since))
    metrics.quota_place(quota.quota_id, waited=not place.taken_now)
    return Held(quota, shard, call, place.at, request.model)


async def retake_place(deps: Deps, held: Held, suffix: str, request: ModelRequest) -> Held:
    """A new place for a retry of the call at ``held`` (a call of its own, under the holder's
    name and ``suffix``). Raises :class:`QuotaWait` when it is later than now."""
    call = quota_log.Call(f"{held.holder}{suffix}", request_tokens(request), held.call.key,
                          held.call.priority)
    place = await quota_log.reserve(deps.store, held.shard_id, call, limits_of(held.quota),
                                    deps.clock)
    if place.at > deps.clock.now():
        raise QuotaWait(held.quota.quota_id, place.at, place.ahead)
    return Held(held.quota, held.shard_id, call, place.at, held.model)


async def answered(deps: Deps, held: Held | None, prompt_tokens: int) -> None:
    """Correct the call's entry with the input tokens its answer counted (tokens limited)."""
    if held is None or held.quota.tpm is None or prompt_tokens <= 0:
        return
    if prompt_tokens != held.tokens:
        await quota_log.correct(deps.store, held.shard_id, held.holder, held.at,
                                prompt_tokens, deps.clock)


async def give_back(deps: Deps, held: Held | None) -> None:
    """Give back the place at ``held``, its call not made (the step waits for something
    else first): the minute does not count it."""
    if held is not None:
        await quota_log.give_back(deps.store, held.shard_id, held.holder, held.at, deps.clock)


async def refused(deps: Deps, held: Held, retry_after: float | None) -> QuotaWait:
    """A 429 for the call at ``held``: pause its shard for the retry delay (at least a second,
    doubled while 429s without one follow each other: :func:`~ackloop.domain.quota.pause`), and
    the wait for the call's new place after it."""
    quota = held.quota
    metrics.model_refused(held.model, limited=True)
    place = await quota_log.refused(deps.store, held.shard_id, held.call, limits_of(quota),
                                    retry_after, quota.mode == "adaptive", deps.clock)
    return QuotaWait(quota.quota_id, place.at, place.ahead)


async def wait_for_place(deps: Deps, claim: Claim, message: ModelStepMessage,
                         wait: QuotaWait, since: float) -> None:
    """The step waits for its place: what it holds is given back (a claim, as not tried) and
    its own message is armed to be published at the place, saying since when it waits
    (``since``: the first wait's start when it waited before). A wake that cannot be armed leaves
    the step to Pub/Sub's redelivery (a retryable error, its retry-after the place)."""
    if claim.version is not None:
        await deps.store.steps.give_back(claim)
    await arm_limiter_wake(deps, wait, limiter="quota", topic="model_steps",
                           message=message.model_dump(mode="json"), run_id=message.run_id,
                           step=claim.key, at=wait.at, since=since, stamp=f"{wait.at:.3f}")


@dataclass(frozen=True)
class Waiting:
    """A run's model step waiting for its place: under which quota, the step, its place, the
    calls ahead of it; its words, as every wait has (:mod:`ackloop.engine.waits.kind`)."""

    quota_id: str
    step: str
    at: float
    ahead: int

    def label(self, now: float) -> tuple[str, str]:
        return ("waiting for", f"its turn under quota {self.quota_id}: {self.ahead} call(s) "
                f"ahead, about {max(0.0, self.at - now):.0f} s")


async def waiting_of(quotas: list[ModelQuota], store: AgentStore, run_id: str, now: float
                     ) -> list[Waiting]:
    """The run's model steps waiting for their places under ``quotas`` (those in force: a
    read of the run's shard per quota; none without quotas)."""
    found = []
    for quota in quotas:
        shard = await quota_log.read(store, shard_id(quota, run_id), now)
        found += [Waiting(quota.quota_id, e.holder.split("/", 1)[1].split("#", 1)[0], e.at,
                          position(shard.entries, e.holder, now))
                  for e in shard.entries if e.holder.startswith(f"{run_id}/") and e.at > now]
    return found
