"""A streamed model call that fails after some of its text was shown, through the real
google-genai streaming client against the fake Gemini server's ``midstream`` fault: retried in
the same request under the step's next attempt, unless the wait is too long, the step is on its
last attempt, or the step was taken over meanwhile (then the request gives up, as before)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from ackloop.api.events import run_events
from ackloop.api.models import DeltaEvent, Event, StepEvent
from ackloop.config.settings import Settings
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StepRecord
from ackloop.domain.wire import QueryMessage
from ackloop.model.gemini import GeminiModel
from ackloop.model.turns import text_turn
from ackloop.testing.inprocess import InProcessLoop
from ackloop_dev.fakes.gemini_server import FakeGeminiServer
from tests.engine.fakes import CountingToolbox, delta_texts, make_loop

ANSWER = "The harbour keeps its boats; the tide keeps its hours; the gulls keep nothing."
RUN_ID = run_id_for_request("req-1")


def _server(faults: str) -> FakeGeminiServer:
    """Six characters a chunk, 50 ms apart: the first delta is written before the fault."""
    return FakeGeminiServer(lambda request: text_turn(ANSWER), faults=faults,
                            stream_chunk_chars=6, stream_delay=0.05)


def _loop(server: FakeGeminiServer, **settings: float) -> InProcessLoop:
    model = GeminiModel(api_key="k", base_url=server.url, timeout_seconds=10.0)
    return make_loop(model, CountingToolbox(),
                     settings=Settings(lease_seconds=10.0, **settings))  # type: ignore[arg-type]


async def _run(loop: InProcessLoop) -> None:
    await loop.submit(QueryMessage(request_id="req-1", text="tell me about the harbour"))
    await loop.run_until_idle()


async def _step(loop: InProcessLoop) -> StepRecord:
    (step,) = await loop.deps.store.steps.get_steps(RUN_ID, ["0000-model"])
    assert step is not None
    return step


async def _exists(loop: InProcessLoop) -> bool:
    return await loop.deps.store.runs.get_run(RUN_ID) is not None


async def _texts(loop: InProcessLoop) -> dict[int, str]:
    """The stored deltas' text of the model step, by attempt."""
    return await delta_texts(loop, RUN_ID)


async def _eventually(check: Callable[[], Awaitable[bool]]) -> None:
    """Poll ``check`` until it holds, for 10 s at most."""
    for _ in range(1000):
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("still not so after 10 s")


async def _has_attempt_1(loop: InProcessLoop) -> bool:
    return 1 in await _texts(loop)


async def _follow(loop: InProcessLoop) -> list[Event]:
    """The run's event stream, read live from when the run exists until it ends."""
    await _eventually(lambda: _exists(loop))
    return [e async for e in run_events(loop.deps.store, RUN_ID, None, poll_seconds=0.02,
                                        max_seconds=30.0) if e is not None]


async def test_a_stream_that_fails_after_text_was_shown_is_retried_in_the_request() -> None:
    with _server("midstream:4") as server:
        loop = _loop(server)
        events, _ = await asyncio.gather(_follow(loop), _run(loop))
        requests = server.stats()["requests"]

    # One delivery of the model step did it all: no 503, no redelivery.
    assert [d.outcome.status for d in loop.deliveries("model")] == [204]
    assert requests == 2
    run = await loop.deps.store.runs.get_run(RUN_ID)
    assert run is not None and run.status is RunStatus.COMPLETED and run.answer == ANSWER
    step = await _step(loop)
    assert step.attempts == 2 and step.result is not None
    assert step.result["text"] == ANSWER and step.result["model_retries"] == 1
    assert step.last_error is not None and "retried in the request" in step.last_error
    # Both attempts' text is stored: the first some of the answer, the second all of it.
    texts = await _texts(loop)
    assert set(texts) == {1, 2} and texts[2] == ANSWER
    assert texts[1] and ANSWER.startswith(texts[1]) and len(texts[1]) <= 24
    # The stream shows attempt 2 superseding attempt 1, then the step with attempt 2's turn.
    deltas = [e for e in events if isinstance(e, DeltaEvent)]
    attempts = [d.attempt for d in deltas]
    assert attempts == sorted(attempts) and set(attempts) == {1, 2}
    assert [d.seq for d in deltas if d.attempt == 2] == list(range(attempts.count(2)))
    assert "".join(d.text for d in deltas if d.attempt == 2) == ANSWER
    (step_event,) = [e for e in events if isinstance(e, StepEvent)]
    assert events.index(step_event) > events.index(deltas[-1])
    assert step_event.step.attempts == 2
    assert (step_event.step.result or {})["text"] == ANSWER
    # The record is one turn: the question and attempt 2's answer.
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"]
    assert transcript.contents[1]["parts"] == [{"text": ANSWER}]


async def test_a_wait_longer_than_retry_wait_seconds_is_left_to_the_redelivery() -> None:
    """The fault's backoff (1 s) is past the 0.5 s a request may wait: released, 503."""
    with _server("midstream:4") as server:
        loop = _loop(server, retry_wait_seconds=0.5)
        await _run(loop)

    assert [d.outcome.status for d in loop.deliveries("model")] == [503, 204]
    step = await _step(loop)
    assert step.attempts == 2 and step.result is not None
    assert step.result["text"] == ANSWER and "model_retries" not in step.result
    texts = await _texts(loop)
    assert set(texts) == {1, 2} and texts[2] == ANSWER


async def test_the_last_attempt_is_not_retried_in_the_request() -> None:
    """An in-request attempt counts toward max_step_attempts: with 2, the second failure is
    released, and the redelivery, which would be a third attempt, fails the run."""
    with _server("midstream:2,midstream:3") as server:
        loop = _loop(server, max_step_attempts=2)
        await _run(loop)
        requests = server.stats()["requests"]

    assert requests == 2
    assert [d.outcome.status for d in loop.deliveries("model")] == [503, 204]
    run = await loop.deps.store.runs.get_run(RUN_ID)
    assert run is not None and run.status is RunStatus.FAILED
    assert "step_attempts_exhausted" in (run.error or "")
    assert "attempted 2 times" in (run.error or "")
    assert set(await _texts(loop)) == {1, 2}


async def test_a_step_taken_over_meanwhile_is_not_retried_nor_recorded_twice() -> None:
    """While the first delivery streams, its lease runs out and a duplicate delivery of the
    same message takes the step over (attempt 2). When the first call then fails, its fenced
    write of attempt 3 is refused: that delivery gives up (503) and calls the model no more.
    The step commits once, the duplicate's turn."""
    with _server("midstream:6") as server:
        loop = _loop(server, step_claims="always")
        clock = loop.deps.clock
        assert isinstance(clock, ManualClock)
        deliver = loop.deliver
        duplicates: list[asyncio.Task[object]] = []

        async def duplicate_once_streaming(message: object) -> object:
            await _eventually(lambda: _has_attempt_1(loop))
            clock.advance(11.0)  # past the first holder's lease
            return await deliver("model", message)  # type: ignore[arg-type]

        async def delivering(kind: str, message: object) -> object:
            if kind == "model" and not duplicates:
                duplicates.append(asyncio.create_task(duplicate_once_streaming(message)))
            elif kind == "model":  # the first one's redelivery comes after the duplicate ended
                await asyncio.gather(*duplicates)
            return await deliver(kind, message)  # type: ignore[arg-type]

        loop.deliver = delivering  # type: ignore[method-assign,assignment]
        await _run(loop)
        await asyncio.gather(*duplicates)
        requests = server.stats()["requests"]

    assert requests == 2  # the first delivery's call, then the duplicate's: no third
    statuses = [d.outcome.status for d in loop.deliveries("model")]
    assert statuses.count(503) == 1 and statuses.count(204) >= 2  # the first, then resends
    step = await _step(loop)
    assert step.attempts == 2 and step.result is not None and step.result["text"] == ANSWER
    assert "model_retries" not in step.result
    texts = await _texts(loop)
    assert set(texts) == {1, 2} and texts[2] == ANSWER
    run = await loop.deps.store.runs.get_run(RUN_ID)
    assert run is not None and run.status is RunStatus.COMPLETED and run.answer == ANSWER
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"]
