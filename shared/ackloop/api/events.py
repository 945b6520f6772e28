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

The child runs under the run (its sub-agents' calls, theirs, and so on: :mod:`ackloop.api.tree`)
are streamed too: their step and waiting events carry the child's ``run_id``. A stream follows a
child from the step that started it (its wait for the child names it) until the child has ended,
reading it the same way, a page a turn, its record in one batch with its siblings' each poll; a
child's steps completed before the step that waited for it go out before that step. A child's
step event carries the stream's cursor (its run's last step sent), so a stream resumed after
it sends again the steps of the children whose calls had not completed by then (keep, per
``run_id``, each step key once). Deltas are the stream's run's only.

While the run goes on, each poll also reads the deltas (:mod:`ackloop.store.deltas`) past the last
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
from dataclasses import dataclass, field

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
from ackloop.api.tree import read_runs, starts_child
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunRecord, StepRecord, StepStatus
from ackloop.engine.children import child_run_id
from ackloop.store import AgentStore
from ackloop.store.deltas import after_step, next_id, read_deltas

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


@dataclass(eq=False)
class Followed:
    """A run of the tree a stream follows (the stream's run, or a child run under it), and how
    far the stream has sent it."""

    run_id: str
    cursor: str | None = None
    """The key of its last step sent."""
    start: str | None = field(init=False)
    """Where its next page of steps starts (None: past its last step)."""
    announced: set[str] = field(default_factory=set)
    """Keys past its cursor announced by its steps read so far."""
    told: set[str] = field(default_factory=set)
    """Its waiting steps sent as a waiting event."""
    children: dict[str, Followed] = field(default_factory=dict)
    """Its child runs seen started, by the key of the step whose call started each."""
    flushed: set[str] = field(default_factory=set)
    """Keys of its completed steps whose child had a pass since they were read completed."""
    ended: bool = False
    """It had ended when its last pass read it (so each of its steps was sent), and so had
    every child of it."""

    def __post_init__(self) -> None:
        self.start = _range_start(self.cursor)


class _Tree:
    """The passes of a stream over its run and the child runs under it (one pass a poll)."""

    def __init__(self, store: AgentStore, root: Followed, page_size: int,
                 turns: asyncio.Semaphore | None) -> None:
        self.store = store
        self.root = root
        self.page_size = page_size
        self.turns = turns
        self.deltas_from = "0" if root.cursor is None else after_step(root.cursor)
        """The next delta id of the stream's run to read."""
        self.live: str | None = None
        """The step of the last delta sent."""

    async def follow(self, node: Followed, run: RunRecord) -> AsyncIterator[Event]:
        """One pass over ``node`` (``run``: its record, read before its steps): its steps that
        can be sent, then its children's."""
        terminal = run.status.terminal
        async for event in self._steps(node, run, terminal):
            yield event
        # A child's step event carries the stream's cursor: none before the first step sent.
        if self.root.cursor is not None:
            async for event in self._children(node):
                yield event
        node.ended = terminal and all(c.ended for c in node.children.values())

    def _held(self, node: Followed, key: str) -> bool:
        """Whether the completed step ``key`` of ``node`` waits for a pass over its child (whose
        steps completed by now then go out first)."""
        child = node.children.get(key)
        return (child is not None and not child.ended and key not in node.flushed
                and self.root.cursor is not None)

    def _discover(self, node: Followed, run: RunRecord, page: list[StepRecord]) -> None:
        """Follow the children the steps of ``page`` past the cursor started."""
        past = None if node.cursor is None else StepKey.parse(node.cursor)
        for step in page:
            if (step.key not in node.children and starts_child(step)
                    and (past is None or StepKey.parse(step.key) > past)):
                node.children[step.key] = Followed(child_run_id(run, step.key))

    def _step_event(self, node: Followed, step: StepRecord) -> StepEvent:
        if node is self.root:
            return StepEvent(cursor=step.key, run_id=node.run_id, step=StepView.of(step))
        assert self.root.cursor is not None  # children are followed only once it is set
        return StepEvent(cursor=self.root.cursor, run_id=node.run_id, step=StepView.of(step))

    async def _steps(self, node: Followed, run: RunRecord, terminal: bool
                     ) -> AsyncIterator[Event]:
        """``node``'s steps past its cursor that can be sent now, a page a turn."""
        while node.start is not None:
            held: str | None = None
            async with self.turns or contextlib.nullcontext():
                page = await self.store.steps.steps_in_range(node.run_id, node.start, LAST_KEY,
                                                             limit=self.page_size)
                full, last_read = len(page) >= self.page_size, page[-1].key if page else None
                ready, blocked = deliverable(page, node.cursor, terminal, node.announced)
                waiting = waits(page, node.told)
                self._discover(node, run, page)
                page = []
                for step in ready:
                    if self._held(node, step.key):
                        held = step.key
                        break
                    if node is self.root and step.key == self.live:  # the rest of its text
                        for delta_id, delta in await read_deltas(
                                self.store, node.run_id, self.deltas_from, None,
                                end_id=after_step(step.key)):
                            self.deltas_from = next_id(delta_id)
                            yield DeltaEvent(run_id=node.run_id, **delta.model_dump())
                    node.cursor = step.key
                    yield self._step_event(node, step)
                ready = []
                for view in waiting:  # after the steps before it, as the run went
                    yield WaitingEvent(run_id=node.run_id, waiting=view)
            if held is not None:
                # The child's steps first (outside this turn: its pages take their own), then
                # this page again from the held step.
                child = node.children[held]
                found = await self.store.runs.get_run(child.run_id)
                if found is None:
                    child.ended = True
                else:
                    async for event in self.follow(child, found):
                        yield event
                node.flushed.add(held)
                node.start = (_range_start(None) if node.cursor is None
                              else key_after(node.cursor))
                continue
            if node.cursor is not None:
                past = StepKey.parse(node.cursor)
                node.announced = {k for k in node.announced if StepKey.parse(k) > past}
            if blocked or not full or last_read is None:
                break
            node.start = key_after(last_read)  # every step of a full page sent: read the next one
        if node.cursor is not None:
            node.start = key_after(node.cursor)  # steps up to the cursor are never read again

    async def _children(self, node: Followed) -> AsyncIterator[Event]:
        """A pass over each child of ``node`` still going (their records in one read)."""
        if node.cursor is not None:  # forget the ended children of the steps sent
            past = StepKey.parse(node.cursor)
            for key in [k for k, c in node.children.items()
                        if c.ended and StepKey.parse(k) <= past]:
                del node.children[key]
                node.flushed.discard(key)
        going = [c for c in node.children.values() if not c.ended]
        for child, found in zip(going, await read_runs(self.store, [c.run_id for c in going]),
                                strict=True):
            if found is None:
                child.ended = True
                continue
            async for event in self.follow(child, found):
                yield event


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
    """Events of ``run_id`` and of the child runs under it after cursor ``after``, until the
    run ends or ``max_seconds`` pass.

    Yields ``None`` when nothing happened for :data:`HEARTBEAT_SECONDS` (a keep-alive tick).
    ``turns``: held while a page of steps is read and sent (:attr:`StreamSlots.turns`), so
    however many streams catch up on a long run at once, only a few of them use the process
    at a time and its other requests are still answered.
    """
    if after == END:
        return
    root = Followed(run_id, after)
    tree = _Tree(store, root, page_size, turns)
    began = clock()
    quiet_since = began
    while True:
        run: RunRecord | None = await store.runs.get_run(run_id)
        if run is None:
            return
        async for event in tree.follow(root, run):  # the run read before its steps
            quiet_since = clock()
            yield event
        if run.status.terminal:
            yield FinishedEvent.of(run)
            return
        if root.cursor is not None:
            tree.deltas_from = max(tree.deltas_from, after_step(root.cursor))
        for delta_id, delta in await read_deltas(store, run_id, tree.deltas_from, page_size):
            tree.deltas_from, tree.live = next_id(delta_id), delta.step
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
