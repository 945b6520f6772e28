"""Claiming a step (waiting inside the request for a busy one) and keeping its lease alive.

A delivery that finds its step held does not answer 503 to be retried later: Pub/Sub push does
not time redeliveries for us (it ignores ``Retry-After``, backs off exponentially from 10 s,
counts every nack toward the dead-letter policy and slows the whole subscription). It watches
the step instead, bounded by the request's time:

- the holder completes: this delivery re-sends what is still unsent and is acknowledged;
- the holder's lease expires (it died): this delivery takes the step over and runs it;
- the bound is reached while another *message* holds a live lease: acknowledged, since that
  message stays unacknowledged until its holder finishes and is redelivered if it dies;
- the bound is reached while the holder is a delivery of this same message (Pub/Sub gave up
  waiting on it) or a retry-after runs past the bound: 503, Pub/Sub redelivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from ackloop.bus.wakes import NoWaker, Wake, WakeNotArmed
from ackloop.domain.clock import Clock
from ackloop.domain.errors import (
    LeaseLost,
    PermanentError,
    RetryableError,
    StepBusy,
    StepHeldElsewhere,
    UnknownRun,
)
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunRecord, RunStatus, StepDecision, StepRecord, Waiting
from ackloop.engine.deps import Deps
from ackloop.engine.outbox_sending import encode
from ackloop.store import AgentStore, Claim, RunRead
from ackloop.store.deltas import DeltaRecord, run_delta_write
from ackloop.telemetry import metrics, tracing
from ackloop.telemetry.context import update_log_context
from ackloop.telemetry.masking import mask_secrets
from ackloop.tools.base import Toolbox, prepare_toolbox

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_POLL_S = 0.2
MAX_POLL_S = 2.0
COMMIT_MARGIN_S = 5.0
"""Time kept in hand at the end of a request for the commit and the publish."""


WAITED_SINCE = "waited_since"
"""The attribute the wake of a step waiting for a limiter carries (its place under a model
quota, a concurrency slot): when the step began to wait."""


@dataclass(frozen=True)
class RequestScope:
    """What a handler knows of the delivery it serves: its message id and its time budget."""

    message_id: str
    deadline: float
    """Clock time by which the request must have answered (its timeout, less a margin)."""
    delivery_attempt: int = 1
    """Pub/Sub's count of this message's deliveries (1 when it does not say): the attempt
    number of a step run unclaimed, whose failed attempts left no document to count them."""
    reads: str | None = None
    """The message's ``reads`` attribute (:attr:`ackloop.domain.records.Outgoing.reads`), if any."""
    redriven: bool = False
    """A dead letter's message published again by a redrive (its ``redriven`` attribute): a
    completed step it finds sends what it committed again, since what was sent then met a
    failed run and did nothing (:func:`ackloop.engine.outbox_sending.sends_again`)."""
    waited_since: float | None = None
    """When the step began to wait for a limiter (its place under its model's quota, a
    concurrency slot), on the message its wake published (its ``waited_since`` attribute:
    :mod:`ackloop.engine.quota`, :mod:`ackloop.engine.concurrency`)."""

    @classmethod
    def starting(cls, deps: Deps, message_id: str, delivery_attempt: int = 1,
                 reads: str | None = None, redriven: bool = False,
                 waited_since: float | None = None) -> RequestScope:
        return cls(message_id, deps.clock.now() + deps.settings.request_timeout_seconds
                   - COMMIT_MARGIN_S, max(1, delivery_attempt), reads, redriven, waited_since)

    def wait_until(self, deps: Deps, call_seconds: float) -> float:
        """Until when a claim may wait: the configured bound, and room left for the call."""
        now = deps.clock.now()
        return now + max(0.0, min(deps.settings.claim_wait_seconds,
                                  self.deadline - call_seconds - now))


class ClaimRef:
    """The current claim of a step being run: the heartbeat replaces it on every renewal, and
    every later write (commit, release, failure) must use the latest one."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        self.waited: tuple[Waiting, StepDecision] | None = None
        """A wait met at once (:func:`ackloop.engine.waits.core.met_at_once`), for the commit."""
        self.slots: list[Any] = []
        """The concurrency slots the step holds (:mod:`ackloop.engine.concurrency`), given
        back once it has committed."""
        self.delivery = uuid.uuid4().hex[:12]
        """This delivery's own name: what its concurrency slots are held by (a duplicate of
        the step, in this process or another, is another delivery)."""


class LimiterWait(Exception):
    """The step waits for a limiter (its place under a model quota, a concurrency slot): not a
    failure. Whoever catches it gives back what the step holds (a claim, as not tried) and
    arms the wake that brings it back (:func:`arm_limiter_wake`)."""


async def arm_limiter_wake(deps: Deps, wait: LimiterWait, *, limiter: str, topic: str,
                           message: JsonDict, run_id: str, step: str, at: float, since: float,
                           stamp: str) -> None:
    """Arm the wake of a step waiting for a limiter (``limiter``: quota, spend, slot): its own
    ``message``, published to ``topic`` at ``at``, saying since when it waits (``since``: the
    first wait's start when it waited before). ``stamp`` names this wake among the step's
    (armed again with the same stamp, it is the same wake). Without a waker, or with one that
    cannot arm it, the step is left to Pub/Sub's redelivery: a retryable error whose
    retry-after is the wake's time."""
    wake = Wake(name=f"{run_id}/{step}/{limiter}/{stamp}", at=at, topic=deps.topic(topic),
                data=encode(message),
                attributes={"run_id": run_id, "step": step, "wake": limiter,
                            WAITED_SINCE: f"{since:.3f}"})
    log.info("run %s step %s: %s", run_id, step, wait)
    try:
        if isinstance(deps.waker, NoWaker):
            raise WakeNotArmed("this deployment has no waker (ACKLOOP_WAKE_QUEUE)")
        await deps.waker.arm(wake)
    except WakeNotArmed as exc:
        raise RetryableError(f"{wait}; its wake was not armed ({exc})",
                             retry_after=max(0.0, wake.at - deps.clock.now())) from exc


async def claim_waiting(
    deps: Deps, run_id: str, key: StepKey, name: str, *, message_id: str, wait_until: float
) -> Claim:
    """Claim the step, watching it while another delivery holds it (see the module docstring).

    Raises :class:`StepHeldElsewhere` (acknowledge) or :class:`StepBusy` (redeliver).
    """
    poll = FIRST_POLL_S
    while True:
        try:
            return await deps.store.steps.claim_step(
                run_id, key, name, owner=deps.owner, now=deps.clock.now(),
                lease_seconds=deps.settings.lease_seconds, message_id=message_id,
            )
        except StepBusy as busy:
            holder = busy.holder if isinstance(busy.holder, StepRecord) else None
            now = deps.clock.now()
            if holder is None:
                raise
            free_at = max(holder.lease_expires_at, holder.not_before)
            if now >= wait_until or holder.not_before > wait_until:
                live_elsewhere = (holder.lease_expires_at > now and holder.not_before <= now
                                  and holder.message_id not in ("", message_id))
                if live_elsewhere:
                    raise StepHeldElsewhere(
                        f"step {key} of {run_id} is held by message {holder.message_id}"
                    ) from busy
                raise
            await deps.clock.sleep(max(0.0, min(poll, free_at - now + 0.05, wait_until - now)))
            poll = min(poll * 2, MAX_POLL_S)


async def claim_in_run(
    deps: Deps, run_id: str, read: RunRead | None, key: StepKey, name: str, *,
    message_id: str, wait_until: float, unclaimed: bool = False, attempt: int = 1,
) -> tuple[RunRead, Claim] | None:
    """Claim a step of a run read just before (and found to have scheduled the step).

    ``unclaimed``: the read found no document at ``key`` and the call may run without a claim
    (:mod:`ackloop.engine.claims`): nothing is written, and the commit creates the step, as
    attempt ``attempt`` (the delivery's).

    Nothing is written for a run that does not exist (:class:`UnknownRun`) or that is not
    running (None: the message is acknowledged as having nothing left to do), except that a
    completed step is returned as it is, so that its outbox can be sent again. A claim that had
    to wait reads the run again afterwards; if that read fails, the claim is given back so the
    redelivery need not wait out the lease.
    """
    if read is None:
        raise UnknownRun(run_id)
    status = read.record.status
    if status is not RunStatus.RUNNING:
        done = await deps.store.steps.completed_step(run_id, key)
        if done is None:
            log.info("run %s is %s: step %s is not claimed", run_id, status, key)
            return None
        tracing.claimed(done.key, done.step.attempts, done.state, 0.0)
        return read, done
    if unclaimed:
        claim = deps.store.steps.unclaimed(run_id, key, name, owner=deps.owner,
                                           now=deps.clock.now(), message_id=message_id,
                                           attempt=attempt)
        tracing.claimed(claim.key, attempt, claim.state, 0.0)
        _observe(read.record, claim)
        return read, claim
    try:
        claim = await deps.store.steps.claim_step(
            run_id, key, name, owner=deps.owner, now=deps.clock.now(),
            lease_seconds=deps.settings.lease_seconds, message_id=message_id)
        tracing.claimed(claim.key, claim.step.attempts, claim.state, 0.0)
        _observe(read.record, claim)
        return read, claim
    except StepBusy:
        waited_from = deps.clock.now()
        claim = await claim_waiting(deps, run_id, key, name, message_id=message_id,
                                    wait_until=wait_until)
        tracing.claimed(claim.key, claim.step.attempts, claim.state,
                        deps.clock.now() - waited_from)
        _observe(read.record, claim)
    try:
        fresh = await deps.store.runs.read_run(run_id)
    except Exception as exc:
        if claim.state != "completed":
            await deps.store.steps.release_step(claim, error=mask_secrets(f"run not read: {exc}"))
        raise
    if fresh is None:
        raise UnknownRun(run_id)
    return fresh, claim


def _observe(run: RunRecord, claim: Claim) -> None:
    """Label the delivery's log lines with the claim's attempt and the run's agent and
    conversation, and count the claims beyond a step's first and the takeovers."""
    update_log_context(attempt=claim.step.attempts, agent=run.agent,
                       conversation_id=run.conversation_id)
    if claim.state in ("new", "taken_over", "unclaimed"):
        metrics.step_claimed(claim.step.kind, claim.step.attempts, claim.state == "taken_over")


class Heartbeat:
    """Renews ``ref.claim`` every third of the lease until stopped.

    Stopping waits for an in-flight renewal instead of cancelling it, so the version used by the
    commit is the one the database really holds. A write of the claim made while it beats
    (:meth:`next_attempt`) takes turns with the renewals: both are fenced on the claim's
    version, so two at once would fence each other out.
    """

    def __init__(self, store: AgentStore, clock: Clock, ref: ClaimRef, lease_seconds: float):
        self.ref = ref
        self.lost = False
        self._store = store
        self._clock = clock
        self._lease = lease_seconds
        self._stop = asyncio.Event()
        self._writing = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def _beat(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=self._lease / 3)
            if self._stop.is_set():
                return
            try:
                async with self._writing:
                    self.ref.claim = await self._store.steps.renew_lease(
                        self.ref.claim, now=self._clock.now(), lease_seconds=self._lease
                    )
            except LeaseLost:
                self.lost = True
                claim = self.ref.claim
                log.warning("lease on %s/%s was taken over", claim.run_id, claim.key)
                return
            except RetryableError as exc:  # keep trying until the lease runs out
                log.warning("heartbeat for %s failed: %s", self.ref.claim.key, exc)

    def start(self) -> None:
        """Start renewing (once; not after :meth:`stop`: a claim made too late is left to
        expire)."""
        if self._task is None and not self._stop.is_set():
            self._task = asyncio.create_task(self._beat())

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    def check(self) -> Claim:
        """The current claim; raises :class:`LeaseLost` if another holder took the step."""
        claim = self.ref.claim
        if self.lost:
            raise LeaseLost(f"step {claim.key} of {claim.run_id} lost its lease")
        return claim

    async def next_attempt(self, error: str) -> Claim:
        """Start the step's next attempt in this delivery (:meth:`Steps.next_attempt`).
        Raises :class:`LeaseLost` if another holder took the step, and then beats no more."""
        async with self._writing:
            self.check()
            try:
                self.ref.claim = await self._store.steps.next_attempt(
                    self.ref.claim, now=self._clock.now(), lease_seconds=self._lease,
                    error=mask_secrets(error))
            except LeaseLost:
                self.lost = True
                self._stop.set()
                raise
        return self.ref.claim


class ClaimAtFirstText:
    """The claim of a streamed model step that started unclaimed (:mod:`ackloop.engine.claims`):
    made when the call's first text arrives, before any of it is written.

    :meth:`start` (from the deltas' writer, with the call's first words) begins the claim as a
    task, so the stream is read on while it is written; the claim and those first words are
    one commit (one round trip: both or neither). The writer awaits :meth:`attempt` before
    its own first write, and :meth:`call` awaits the claim before it returns. The claim is
    the one an eagerly claimed step makes (the step's document created with a lease, as the
    delivery's attempt, then the heartbeat), but only a create: if another delivery claimed or
    recorded the step meanwhile, this one has lost it (:class:`LeaseLost`), the call is
    cancelled and nothing is written. A call that shows no text never claims: it commits
    unclaimed.
    """

    def __init__(self, store: AgentStore, clock: Clock, ref: ClaimRef, beat: Heartbeat,
                 lease_seconds: float) -> None:
        self._store, self._clock, self._ref, self._beat = store, clock, ref, beat
        self._lease = lease_seconds
        self._task: asyncio.Task[Claim | None] | None = None
        self._error: BaseException | None = None
        self._call: asyncio.Future[Any] | None = None

    def start(self, first: DeltaRecord | None = None) -> None:
        """Begin the claim, once (the first text), committing ``first`` (the write of the
        call's first words) with it; nothing is awaited here."""
        if self._task is None:
            self._task = asyncio.create_task(self._claim(first),
                                             name=f"claim {self._ref.claim.key}")

    async def _claim(self, first: DeltaRecord | None) -> Claim | None:
        unclaimed = self._ref.claim
        try:
            now = self._clock.now()
            words = () if first is None else (
                run_delta_write(self._store, unclaimed.run_id, first, now),)
            claim = await self._store.steps.claim_unclaimed(
                unclaimed, now=now, lease_seconds=self._lease, with_writes=words)
        except Exception as exc:
            log.info("step %s of %s not claimed at its first text: %s", unclaimed.key,
                     unclaimed.run_id, exc)
            self._error = exc
            if self._call is not None:
                self._call.cancel()  # this delivery's call is not the step's any more
            return None
        self._ref.claim = claim
        self._beat.start()
        tracing.note(claim=claim.state, attempt=claim.step.attempts)
        tracing.event("claim at first text", attempt=claim.step.attempts)
        return claim

    async def attempt(self) -> int | None:
        """The claim's attempt once it is held; None if it was not had (:data:`DeltasReady`)."""
        assert self._task is not None
        claim = await asyncio.shield(self._task)
        return None if claim is None else claim.step.attempts

    async def call(self, call: Awaitable[T]) -> T:
        """Await ``call`` (whose text callback starts the claim), cancelled if the claim is lost,
        then the claim if it was started. Raises the claim's failure (:class:`LeaseLost` when
        another delivery has the step) in place of whatever the call did, since the step is
        not this delivery's to record."""
        task: asyncio.Future[T] = asyncio.ensure_future(call)
        self._call = task
        try:
            result = await task
        except BaseException as exc:
            current = asyncio.current_task()
            if (isinstance(exc, asyncio.CancelledError) and current is not None
                    and current.cancelling()):
                raise  # the request itself is being cancelled
            await self._settled()
            if self._error is not None:
                raise self._error from exc
            raise
        await self._settled()
        if self._error is not None:
            raise self._error
        return result

    async def _settled(self) -> None:
        if self._task is not None:
            await asyncio.shield(self._task)


@contextlib.asynccontextmanager
async def heartbeat(
    store: AgentStore, clock: Clock, ref: ClaimRef, lease_seconds: float
) -> AsyncIterator[Heartbeat]:
    beat = Heartbeat(store, clock, ref, lease_seconds)
    if ref.claim.version is not None:  # an unclaimed step has no lease to keep alive
        beat.start()
    try:
        yield beat
    finally:
        await beat.stop()


async def prepare_tools(deps: Deps, ref: ClaimRef, toolbox: Toolbox) -> None:
    """Await the toolbox's ``prepare()`` (an MCP server's listing) with the lease kept alive.

    A toolbox without one (every ``@tool`` list) costs the step nothing: no heartbeat task.
    """
    if getattr(toolbox, "prepare", None) is None:
        return
    async with heartbeat(deps.store, deps.clock, ref, deps.settings.lease_seconds):
        await prepare_toolbox(toolbox)


@contextlib.asynccontextmanager
async def released_on_failure(
    store: AgentStore, clock: Clock, ref: ClaimRef
) -> AsyncIterator[None]:
    """On a retryable or unexpected failure, give the lease back (honouring a retry-after) and
    re-raise, so the redelivery can take the step at once instead of waiting out the lease."""
    try:
        yield
    except LimiterWait:
        raise  # a wait, not a failure: its catcher gives the claim back as not tried
    except RetryableError as exc:
        await store.steps.release_step(
            ref.claim,
            error=mask_secrets(f"{type(exc).__name__}: {exc}"),
            not_before=clock.now() + exc.retry_after if exc.retry_after else 0.0,
        )
        raise
    except PermanentError:
        raise  # the handler records the failure with this claim: the lease must still be held
    except Exception as exc:
        with contextlib.suppress(Exception):  # the lease then simply expires
            await store.steps.release_step(ref.claim,
                                           error=mask_secrets(f"{type(exc).__name__}: {exc}"))
        raise
