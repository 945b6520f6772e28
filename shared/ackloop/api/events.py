"""A run's events, derived from its documents: each completed step once, then the end.

The step documents are the log: one per step, whatever the number of deliveries or attempts,
so a retried step is one event. Events go out in key order (execution order), and a step is
sent only when every step before it that the run has announced (a model step's outbox names
the tool steps it started) has completed too, so a cursor (the last key sent) never skips a
step that completes later.

A stream reads incrementally: one run read per poll, then the step documents past its cursor,
at most ``page_size`` at a time, so what one stream holds does not grow with the run; a page is
read and sent in one of the process's few turns (:attr:`StreamSlots.turns`), so many streams
catching up on a long run at once leave the process free for its other requests. The
steps announced by the steps already sent are remembered (only keys past the cursor). A
process keeps at most ``api_stream_max_open`` streams (:class:`StreamSlots`), each for at most
``api_stream_max_seconds``, and closes a stream whose client stops reading
(:class:`EventStreamResponse`).

A step that waits for a person's decision is sent as a ``waiting`` event once per stream (it
is not a cursor); its step event follows when it completes.

While the run goes on, each poll also reads the deltas (:mod:`ackloop.deltas`) past the last
one sent, of the steps past the cursor only. A step's deltas are all written by its commit,
so once its completion is read, one more read finds the rest of them: a stream that sent some
of a step's deltas sends all of them before the step's event. Once its event is sent, a step's
deltas are never read again (a stream that starts after it completed sends its event only).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager

from starlette.responses import StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from ackloop.api.errors import ApiError
from ackloop.api.models import (
    DeltaEvent,
    Event,
    FinishedEvent,
    StepEvent,
    StepView,
    WaitingEvent,
    WaitingView,
)
from ackloop.deltas import after_step, next_id, read_deltas
from ackloop.keys import StepKey
from ackloop.records import RunRecord, StepRecord, StepStatus
from ackloop.store import AgentStore

log = logging.getLogger(__name__)

END = "end"
LAST_KEY = "9999-tool-999"
HEARTBEAT_SECONDS = 15.0
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def _range_start(cursor: str | None) -> str:
    if cursor is None:
        return str(StepKey.model(0))
    return str(StepKey.model(StepKey.parse(cursor).turn))


def key_after(key: str) -> str | None:
    """The first step position after ``key`` (None after the last one)."""
    step = StepKey.parse(key)
    if step.kind == "model":
        return str(StepKey.tool(step.turn, 0))
    if step.index < 999:
        return str(StepKey.tool(step.turn, step.index + 1))
    return str(StepKey.model(step.turn + 1)) if step.turn < 9999 else None


def deliverable(steps: list[StepRecord], cursor: str | None, terminal: bool,
                announced: set[str] | None = None) -> tuple[list[StepRecord], bool]:
    """The steps after ``cursor`` that can be sent now, in key order, and whether sending
    stopped at a step that has not completed.

    ``steps`` is a run of consecutive step documents (a page); ``announced`` holds the keys
    announced by steps read before (and receives the ones announced by ``steps``). While the
    run goes on, sending stops at the first step (recorded or only announced) that has not
    completed; once the run has ended, the completed ones are all sent.
    """
    announced = set() if announced is None else announced
    announced.update(
        o.target_step for s in steps if s.status is StepStatus.COMPLETED for o in s.outbox
        if o.target_step is not None
    )
    by_key = {s.key: s for s in steps}
    last_read = StepKey.parse(steps[-1].key) if steps else None
    after = None if cursor is None else StepKey.parse(cursor)
    ready = []
    for key in sorted(set(by_key) | announced, key=StepKey.parse):
        position = StepKey.parse(key)
        if after is not None and position <= after:
            continue
        if last_read is not None and position > last_read and key not in by_key:
            # Announced past this page: the next page says whether it is recorded.
            break
        step = by_key.get(key)
        if step is not None and step.status is StepStatus.COMPLETED:
            ready.append(step)
        elif not terminal:
            return ready, True
    return ready, False


def waits(steps: list[StepRecord], told: set[str]) -> list[WaitingView]:
    """The steps that wait for a decision and were not told yet (``told`` receives them)."""
    views = [v for s in steps if s.key not in told and (v := WaitingView.of(s)) is not None]
    told.update(v.step for v in views)
    return views


async def run_events(
    store: AgentStore,
    run_id: str,
    after: str | None,
    *,
    poll_seconds: float,
    max_seconds: float,
    page_size: int = 20,
    clock: Callable[[], float] = time.monotonic,
    turns: asyncio.Semaphore | None = None,
) -> AsyncIterator[Event | None]:
    """Events of ``run_id`` after cursor ``after``, until the run ends or ``max_seconds`` pass.

    Yields ``None`` when nothing happened for :data:`HEARTBEAT_SECONDS` (a keep-alive tick).
    ``turns``: held while a page of steps is read and sent (:attr:`StreamSlots.turns`), so
    however many streams catch up on a long run at once, only a few of them use the process
    at a time and its other requests are still answered.
    """
    if after == END:
        return
    cursor = after
    deltas_from = "0" if cursor is None else after_step(cursor)  # the next delta id to read
    live: str | None = None  # the step of the last delta sent
    announced: set[str] = set()
    told: set[str] = set()  # the waiting steps this stream has sent a waiting event for
    start: str | None = _range_start(cursor)  # the cursor's turn: what its model step announced
    began = clock()
    quiet_since = began
    while True:
        run: RunRecord | None = await store.get_run(run_id)
        if run is None:
            return
        terminal = run.status.terminal  # read before the steps: all of them are in by then
        while start is not None:
            async with turns or contextlib.nullcontext():
                page = await store.steps_in_range(run_id, start, LAST_KEY, limit=page_size)
                full, last_read = len(page) >= page_size, page[-1].key if page else None
                ready, blocked = deliverable(page, cursor, terminal, announced)
                waiting = waits(page, told)
                page = []
                for step in ready:
                    if step.key == live:  # the rest of its text first
                        for delta_id, delta in await read_deltas(
                                store, run_id, deltas_from, None, end_id=after_step(step.key)):
                            deltas_from = next_id(delta_id)
                            yield DeltaEvent(run_id=run_id, **delta.model_dump())
                    cursor = step.key
                    quiet_since = clock()
                    yield StepEvent(cursor=step.key, run_id=run_id, step=StepView.of(step))
                ready = []
                for view in waiting:  # after the steps before it, as the run went
                    quiet_since = clock()
                    yield WaitingEvent(run_id=run_id, waiting=view)
            if cursor is not None:
                past = StepKey.parse(cursor)
                announced = {k for k in announced if StepKey.parse(k) > past}
            if blocked or not full or last_read is None:
                break
            start = key_after(last_read)  # every step of a full page sent: read the next one
        if cursor is not None:
            start = key_after(cursor)  # steps up to the cursor are never read again
        if terminal:
            yield FinishedEvent.of(run)
            return
        if cursor is not None:
            deltas_from = max(deltas_from, after_step(cursor))
        for delta_id, delta in await read_deltas(store, run_id, deltas_from, page_size):
            deltas_from, live = next_id(delta_id), delta.step
            quiet_since = clock()
            yield DeltaEvent(run_id=run_id, **delta.model_dump())
        now = clock()
        if now - began >= max_seconds:
            return
        if now - quiet_since >= HEARTBEAT_SECONDS:
            quiet_since = now
            yield None
        await asyncio.sleep(poll_seconds)


def ndjson(event: Event) -> str:
    """One line of an ``application/x-ndjson`` stream."""
    return event.model_dump_json() + "\n"


def sse(event: Event | None) -> str:
    """One Server-Sent Event (``id`` is the cursor, for ``Last-Event-ID``; a waiting event or a
    delta has none, so a reconnect resumes after the last step), or a comment."""
    if event is None:
        return ": keep-alive\n\n"
    data = json.dumps(event.model_dump(mode="json"), separators=(",", ":"))
    if isinstance(event, DeltaEvent | WaitingEvent):
        return f"event: {event.type}\ndata: {data}\n\n"
    return f"id: {event.cursor}\nevent: {event.type}\ndata: {data}\n\n"


TURNS = 4
"""How many streams of a process read and send a page of steps at once (the others wait)."""


class StreamSlots:
    """How many event streams this process has open, and the most it accepts; and the turns
    they take to read and send pages of steps (:data:`TURNS` at a time)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.turns = asyncio.Semaphore(TURNS)

    def check(self) -> None:
        """503 (with ``Retry-After``) when no slot is free."""
        if self.open >= self.limit:
            raise ApiError(503, "too_many_streams",
                           f"this server already has {self.open} event streams open (its limit "
                           f"is {self.limit}); retry later, or poll GET /runs/{{run_id}}",
                           headers={"Retry-After": "5"})

    @contextmanager
    def taken(self) -> Iterator[None]:
        """Hold a slot for the ``with`` block; 503 (with ``Retry-After``) when none is free."""
        self.check()
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1


class StreamClosed(Exception):
    """The client stopped reading (or the stream's lifetime ran out) while a chunk was sent."""


class EventStreamResponse(StreamingResponse):
    """A stream that holds one of the process's :class:`StreamSlots` while it is open, and
    gives up on a client that does not take a chunk within ``send_timeout`` seconds or keeps
    the stream past ``max_seconds``: the connection is then closed, and nothing stays held.

    The slot is taken when the response is built (so an over-limit request answers 503 before
    anything is sent) and given back when the response ends, however it ends.
    """

    def __init__(self, content: AsyncIterator[str], *, slots: StreamSlots, media_type: str,
                 send_timeout: float, max_seconds: float) -> None:
        self._slot = slots.taken()
        self._slot.__enter__()
        super().__init__(content, media_type=media_type, headers=STREAM_HEADERS)
        self.send_timeout = send_timeout
        self.deadline = time.monotonic() + max_seconds + send_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded_send(message: Message) -> None:
            left = min(self.send_timeout, self.deadline - time.monotonic())
            try:
                await asyncio.wait_for(send(message), timeout=max(0.0, left))
            except TimeoutError as exc:
                raise StreamClosed(f"client did not read for {self.send_timeout:g} s") from exc

        try:
            await super().__call__(scope, receive, bounded_send)
        except* StreamClosed as group:
            # Returning without finishing the response makes the server close the connection.
            log.info("event stream closed: %s", group.exceptions[0])
        finally:
            self._slot.__exit__(None, None, None)
            iterator = self.body_iterator
            if hasattr(iterator, "aclose"):
                await iterator.aclose()
