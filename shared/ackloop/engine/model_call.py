"""A model step's call to the model: the lease kept alive while it runs, retryable errors
waited out inside the request while that fits, and a streamed call's text written as it comes.

Split from :mod:`ackloop.engine.model_step`, which decides what to ask and what the answer
means: this module only makes the call (:func:`call_model`) and knows nothing of runs or
transcripts.
"""

from __future__ import annotations

import logging
import time

from ackloop.domain.errors import ModelRetryableError
from ackloop.engine import quota
from ackloop.engine.deps import Deps
from ackloop.engine.lease import ClaimAtFirstText, ClaimRef, RequestScope, heartbeat
from ackloop.model.base import ModelClient, ModelRequest, ModelTurn, StreamingModelClient
from ackloop.store.deltas import DeltaRecord, DeltaWriter, run_delta_writer
from ackloop.telemetry import metrics, tracing
from ackloop.telemetry.context import update_log_context

log = logging.getLogger(__name__)


async def call_model(
    deps: Deps, ref: ClaimRef, request: ModelRequest, scope: RequestScope,
    held: quota.Held | None = None,
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

    Under a model quota (``held``: the call's place, :mod:`ackloop.engine.quota`) a 429 is
    not retried here: it pauses the quota and the step waits for a new place
    (:class:`~ackloop.engine.quota.QuotaWait`); another retry takes a place of its own first,
    and the answer corrects the place's tokens.

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
                if held is not None and exc.quota_exhausted:
                    raise await quota.refused(deps, held, exc.retry_after) from exc
                if exc.quota_exhausted:
                    metrics.model_refused(request.model, limited=False)
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
                if held is not None:  # the retry is a call of its own: it takes its own place
                    held = await quota.retake_place(deps, held, f"#{len(retried)}", request)
    beat.check()
    await quota.answered(deps, held, turn.usage.prompt_tokens)
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
    return run_delta_writer(deps.store, claim.run_id, claim.key, claim.step.attempts,
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
