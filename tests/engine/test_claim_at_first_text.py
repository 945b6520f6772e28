"""A streamed model step that starts unclaimed claims its step at its first text
(ackloop.engine.claims, ClaimAtFirstText): a turn that shows no text commits unclaimed, a turn
with text claims once before its first delta is written, a duplicate that shows text after the
claim gives its call up, and a crash after the claim is recovered like an eager claim's.

The model is an in-process streaming client whose calls wait at gates the test opens; the
store is the in-memory one, recording in one log every write and the model's calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from ackloop.config.settings import Settings
from ackloop.docdb.base import Version, Write
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus, StepRecord, StepStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.dispatch import Outcome
from ackloop.model.base import ModelRequest, ModelTurn, TextSink
from ackloop.model.scripted import reference_workload_script
from ackloop.model.turns import calls_turn, text_turn
from ackloop.testing.inprocess import InProcessLoop
from tests.engine.fakes import (
    CountingToolbox,
    CrashingFaults,
    SimulatedCrash,
    delta_texts,
    first_model_step,
    make_loop,
)

STREAMED = Settings(lease_seconds=10.0)
UNARY = Settings(lease_seconds=10.0, model_stream=False)
ANSWER = "The harbour keeps its boats and the tide keeps its hours"
BOUND_S = 10.0
"""Longest a test waits for something it has set going (a bound, never a pause)."""

Script = Callable[[ModelRequest, int], ModelTurn]


class StreamedModel:
    """A streaming model client: call ``n`` plays ``script(request, n)`` and hands its text
    out a word at a time. A test may hold call ``n`` before its first word (``before[n]``) or
    right after it (``after_first[n]``); ``started[n]`` is set when call ``n`` begins."""

    provider = "scripted"

    def __init__(self, script: Script, log: list[str]) -> None:
        self.script, self.log = script, log
        self.calls = 0
        self.started: dict[int, asyncio.Event] = {}
        self.before: dict[int, asyncio.Event] = {}
        self.after_first: dict[int, asyncio.Event] = {}

    def event(self, table: dict[int, asyncio.Event], n: int) -> asyncio.Event:
        return table.setdefault(n, asyncio.Event())

    async def generate(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        return self.script(request, self.calls)

    async def generate_streaming(self, request: ModelRequest, on_text: TextSink) -> ModelTurn:
        self.calls += 1
        n = self.calls
        self.log.append(f"call {n}")
        self.event(self.started, n).set()
        turn = self.script(request, n)
        if n in self.before:
            await self.before[n].wait()
        for i, word in enumerate((turn.text or "").split(" ")):
            on_text(word if i == 0 else f" {word}")
            if i == 0 and n in self.after_first:
                await self.after_first[n].wait()
        return turn


class RecordingDB(MemoryDocumentDB):
    """The in-memory store, logging every write it applies (``create <path>``, ``update
    <path>``, ``set <path>``) with the model's calls, and keeping the step document as it was
    when the first delta was written."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log
        self.first_delta = asyncio.Event()
        self.step_at_first_delta: JsonDict | None = None
        self.commits: list[list[str]] = []
        """Each commit's writes, as the log names them."""

    async def create(self, path: str, data: JsonDict) -> Version:
        version = await super().create(path, data)
        self.log.append(f"create {path}")
        return version

    async def commit(self, writes: Sequence[Write]) -> list[Version]:
        versions = await super().commit(writes)
        self.commits.append([f"{w.op} {w.path}" for w in writes])
        for w in writes:
            self.log.append(f"{w.op} {w.path}")
            if "/deltas/" in w.path and not self.first_delta.is_set():
                run_path = w.path.split("/deltas/")[0]
                step = self._snapshot(f"{run_path}/steps/{w.data['step']}")
                self.step_at_first_delta = step.data if step is not None else None
                self.first_delta.set()
        return versions


def _loop(script: Script, settings: Settings = STREAMED, tools: CountingToolbox | None = None,
          faults: CrashingFaults | None = None) -> tuple[InProcessLoop, StreamedModel, RecordingDB]:
    log: list[str] = []
    model = StreamedModel(script, log)
    loop = make_loop(model, tools or CountingToolbox({"lookup": "42"}), settings=settings,
                     faults=faults)
    db = RecordingDB(log)
    loop.deps.store.db.inner = db  # type: ignore[attr-defined]
    return loop, model, db


def _reference(request: ModelRequest, n: int) -> ModelTurn:
    """Two turns of function calls only, then an answer."""
    return reference_workload_script("lookup", {"key": "k"}, answer=ANSWER)(request)


def _answer(request: ModelRequest, n: int) -> ModelTurn:
    return text_turn(f"{ANSWER} ({n})", request=request)


def _writes_to(log: list[str], step: str) -> list[str]:
    return [entry for entry in log if entry.endswith(f"/steps/{step}")]


async def _step(loop: InProcessLoop, run_id: str, key: str) -> StepRecord:
    (step,) = await loop.deps.store.steps.get_steps(run_id, [key])
    assert step is not None
    return step


async def _counted(settings: Settings) -> tuple[dict[str, tuple[int, int]], InProcessLoop,
                                                 list[str]]:
    """The reference run: round trips and documents written by each step's delivery."""
    loop, _, db = _loop(_reference, settings)
    await loop.deps.refresh_limits()  # as a process does when it starts (hosting.runtime)
    counters = loop.deps.store.db.counters  # type: ignore[attr-defined]
    per_step: dict[str, tuple[int, int]] = {}
    deliver = loop.deliver

    async def counted(kind, message):  # type: ignore[no-untyped-def]
        trips, written = counters.round_trips, counters.docs_written
        outcome = await deliver(kind, message)
        per_step[message.attributes.get("step", kind)] = (counters.round_trips - trips,
                                                          counters.docs_written - written)
        return outcome

    loop.deliver = counted  # type: ignore[method-assign]
    await loop.submit(QueryMessage(request_id="counted", text="go"))
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id_for_request("counted"))
    assert run is not None and run.status is RunStatus.COMPLETED and run.answer == ANSWER
    return per_step, loop, db.log


async def test_a_streamed_turn_of_function_calls_only_commits_unclaimed() -> None:
    """No text, no claim: the streamed step of a function-call turn reads and commits, as the
    unary one does; only the answer's step, which shows text, claims."""
    streamed, loop, log = await _counted(STREAMED)
    unary, _, _ = await _counted(UNARY)
    run_id = run_id_for_request("counted")

    for key in ("0000-model", "0001-model"):
        assert streamed[key] == unary[key]
        assert streamed[key][0] == 2  # one read, one commit
        assert _writes_to(log, key) == [f"create runs/{run_id}/steps/{key}"]
        step = await _step(loop, run_id, key)
        assert step.unclaimed and step.status is StepStatus.COMPLETED and step.attempts == 1
    # The answer's step claimed (one create), then committed on that claim (one update).
    assert _writes_to(log, "0002-model") == [f"create runs/{run_id}/steps/0002-model",
                                             f"update runs/{run_id}/steps/0002-model"]
    answered = await _step(loop, run_id, "0002-model")
    assert answered.unclaimed and answered.attempts == 1  # its call started unclaimed
    assert await delta_texts(loop, run_id) == {1: ANSWER}


async def test_the_claim_and_the_first_words_are_one_commit() -> None:
    """The answer's step: one read, one commit of its claim with its first delta, and its own
    commit with the rest of its text (a call that ends within the flush interval of its
    first words); the function-call turns before it, one read and one commit each."""
    streamed, loop, _ = await _counted(STREAMED)
    run_id = run_id_for_request("counted")
    db = loop.deps.store.db.inner  # type: ignore[attr-defined]
    step_path = f"runs/{run_id}/steps/0002-model"
    (claim,) = [c for c in db.commits if f"create {step_path}" in c]
    assert claim == [f"create {step_path}", f"set runs/{run_id}/deltas/0002-model-001-00000"]
    deltas = [c for c in db.commits if any("/deltas/" in w for w in c)]
    assert deltas[0] == claim
    # The rest of the text went with the step's own commit.
    assert len(deltas) == 2 and f"update {step_path}" in deltas[1]
    assert f"set runs/{run_id}/deltas/0002-model-001-00001" in deltas[1]
    assert streamed["0002-model"][0] == 3  # read, claim + first words, commit + the rest
    assert await delta_texts(loop, run_id) == {1: ANSWER}


async def test_a_turn_with_text_claims_once_before_its_first_delta_is_written() -> None:
    """The call starts unclaimed; its first word starts the claim, and the first delta is
    written, under the claim's attempt, while the call is still streaming."""
    loop, model, db = _loop(_answer)
    held = model.event(model.after_first, 1)
    await loop.submit(QueryMessage(request_id="text", text="tell me about the harbour"))
    running = asyncio.create_task(loop.run_until_idle())
    run_id = run_id_for_request("text")
    step_path = f"runs/{run_id}/steps/0000-model"

    await asyncio.wait_for(db.first_delta.wait(), BOUND_S)
    assert not running.done()  # the call is held after its first word
    at_first_delta = db.step_at_first_delta
    assert at_first_delta is not None, "the first delta was written before the claim"
    assert at_first_delta["status"] == "running" and at_first_delta["attempts"] == 1
    assert at_first_delta["lease_expires_at"] > loop.deps.clock.now()
    held.set()
    await asyncio.wait_for(running, BOUND_S)

    # The claim was made after the call began, once, and the commit went on that claim.
    assert db.log.index(f"create {step_path}") > db.log.index("call 1")
    assert _writes_to(db.log, "0000-model") == [f"create {step_path}", f"update {step_path}"]
    step = await _step(loop, run_id, "0000-model")
    assert step.status is StepStatus.COMPLETED and step.attempts == 1 and step.unclaimed
    assert await delta_texts(loop, run_id) == {1: f"{ANSWER} (1)"}
    assert [d.outcome.status for d in loop.deliveries("model")] == [204]


async def _race(loop: InProcessLoop, model: StreamedModel, db: RecordingDB, request_id: str
                ) -> tuple[str, tuple[Any, Any], Outcome, Outcome]:
    """Two deliveries of a run's first model step, both read before either claims: call 1
    shows its first word and claims (its first delta written), then call 2 goes on to its end
    and its delivery answers; then call 1 ends. Returns the run id, the step message (kind,
    message), and the outcomes of the first delivery and of the duplicate."""
    kind, message = await first_model_step(loop, QueryMessage(request_id=request_id,
                                                              text="hi"))
    first_word, second_call = model.event(model.before, 1), model.event(model.before, 2)
    finish_first = model.event(model.after_first, 1)

    first = asyncio.create_task(loop.deliver(kind, message))
    await asyncio.wait_for(model.event(model.started, 1).wait(), BOUND_S)
    second = asyncio.create_task(loop.deliver(kind, message))
    await asyncio.wait_for(model.event(model.started, 2).wait(), BOUND_S)
    first_word.set()  # the first delivery shows text: it claims, and its first delta goes out
    await asyncio.wait_for(db.first_delta.wait(), BOUND_S)
    second_call.set()  # the duplicate goes on only after that claim
    lost = await asyncio.wait_for(second, BOUND_S)
    finish_first.set()
    won = await asyncio.wait_for(first, BOUND_S)
    return run_id_for_request(request_id), (kind, message), won, lost


async def test_a_duplicate_that_shows_text_after_the_claim_gives_its_call_up() -> None:
    """Two deliveries of one step both start unclaimed. The first to show text claims; the
    other, at its first text, finds the step claimed: it writes no delta, is redelivered, and
    its redelivery finds the step recorded. One result, one attempt's text."""
    loop, model, db = _loop(_answer)
    run_id, (kind, message), won, lost = await _race(loop, model, db, "dup")

    assert won.status == 204
    assert lost.status == 503 and not lost.acknowledged
    step = await _step(loop, run_id, "0000-model")
    assert step.status is StepStatus.COMPLETED and step.attempts == 1
    assert (step.result or {})["text"] == f"{ANSWER} (1)"
    assert await delta_texts(loop, run_id) == {1: f"{ANSWER} (1)"}  # nothing of call 2's
    assert _writes_to(db.log, "0000-model").count(f"update runs/{run_id}/steps/0000-model") == 1
    # The duplicate's redelivery finds the step completed: nothing is called again.
    again = await loop.deliver(kind, message)
    assert again.acknowledged and model.calls == 2
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.answer == f"{ANSWER} (1)"
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"]


async def test_a_duplicate_of_function_calls_only_loses_its_commit_to_the_claimed_step(
) -> None:
    """The other order: the duplicate's turn shows no text and commits unclaimed after the
    first delivery claimed at its text. The commit's create finds the step held: nothing is
    recorded by the duplicate, which is redelivered; the claimed step records its answer."""

    def script(request: ModelRequest, n: int) -> ModelTurn:
        if n == 2:
            return calls_turn([("lookup", {"key": "k"})], request=request)
        return _answer(request, n)

    loop, model, db = _loop(script)
    run_id, _, won, lost = await _race(loop, model, db, "calls")

    assert won.status == 204 and lost.status == 503
    step = await _step(loop, run_id, "0000-model")
    assert step.status is StepStatus.COMPLETED and (step.result or {})["calls"] == []
    assert model.calls == 2
    loop._collect()
    assert loop.queued() == []  # no tool step: the call the duplicate asked for is not made
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert await delta_texts(loop, run_id) == {1: f"{ANSWER} (1)"}


async def test_a_crash_after_the_claim_at_first_text_is_taken_over_by_the_redelivery() -> None:
    """The process dies after the call, before the commit: the step was claimed at its first
    text, so the redelivery finds a live lease, waits it out and takes the step over (attempt
    2), as after an eager claim. Recorded once, with the second attempt's text."""
    loop, model, db = _loop(_answer, faults=CrashingFaults({"model:after_call"}))
    held = model.event(model.after_first, 1)
    await loop.submit(QueryMessage(request_id="crash", text="hi"))
    running = asyncio.create_task(loop.run_until_idle(crash=SimulatedCrash))
    await asyncio.wait_for(db.first_delta.wait(), BOUND_S)
    held.set()  # the call ends, and the process dies before the commit
    await asyncio.wait_for(running, BOUND_S)
    run_id = run_id_for_request("crash")
    step_path = f"runs/{run_id}/steps/0000-model"

    assert model.calls == 2
    assert db.log.index(f"create {step_path}") > db.log.index("call 1")  # claimed at its text
    assert db.log.index("call 2") > db.log.index(f"create {step_path}")
    step = await _step(loop, run_id, "0000-model")
    assert step.status is StepStatus.COMPLETED and step.attempts == 2
    assert (step.result or {})["text"] == f"{ANSWER} (2)"
    texts = await delta_texts(loop, run_id)
    assert set(texts) == {1, 2} and texts[2] == f"{ANSWER} (2)"
    assert texts[1] and f"{ANSWER} (1)".startswith(texts[1])  # what was shown before the crash
    assert [d.outcome.status for d in loop.deliveries("model")] == [204]  # the redelivery
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    assert [c["role"] for c in transcript.contents] == ["user", "model"]
