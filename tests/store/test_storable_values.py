"""What Firestore cannot store never wedges a run (on memory and on the emulator): a tool's
result that nests arrays in arrays or too deep reaches the model as JSON text; a step whose
record still cannot be stored ends its run, failed with the reason, instead of leaving it
running; events are sized as Firestore sizes them and kept out of the run's document, so the
most events a run accepts leave it endable."""

from __future__ import annotations

from typing import Any

import pytest

from ackloop.docdb.base import DocumentDB
from ackloop.domain.document_sizes import document_size, value_size
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import ReceivedEvent, RunLimits, RunRecord, RunStatus, StopReason
from ackloop.domain.wire import MAX_EVENT_PAYLOAD_BYTES, QueryMessage, check_event_payload
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import MAX_RECEIVED_EVENTS, AgentStore, DecisionRefused, RunEnd
from ackloop.tools import ToolSet, tool
from tests.engine.fakes import make_loop


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"x": 1}
    for _ in range(levels - 1):
        value = {"n": value}
    return value


@tool
def matrix(rows: int) -> list[list[int]]:
    """A table of numbers, row by row."""
    return [[r, r * r] for r in range(rows)]


@tool
def tree(levels: int) -> dict[str, Any]:
    """A deeply nested object."""
    return deep(levels)


async def run_on(db: DocumentDB, prefix: str, turns: list[Any], request_id: str
                 ) -> tuple[AgentStore, RunRecord, ScriptedModel]:
    model = ScriptedModel.from_turns(turns)
    loop = make_loop(model, ToolSet([matrix, tree]))
    loop.deps.store = store = AgentStore(db, prefix)
    await loop.submit(QueryMessage(request_id=f"{prefix}{request_id}", text="go"))
    await loop.run_until_idle()
    run = await store.runs.get_run(run_id_for_request(f"{prefix}{request_id}"))
    assert run is not None
    return store, run, model


@pytest.mark.parametrize(("name", "args"), [("matrix", {"rows": 3}), ("tree", {"levels": 30})])
async def test_a_result_firestore_cannot_store_as_it_is_reaches_the_model_as_json_text(
    db: DocumentDB, prefix: str, name: str, args: dict[str, Any],
) -> None:
    _, run, model = await run_on(db, prefix, [calls_turn([(name, args)]),
                                                  text_turn("read it")], name)
    assert run.status is RunStatus.COMPLETED and run.answer == "read it", run
    (response,) = [p["function_response"]["response"]
                   for p in model.requests[1].contents[-1]["parts"]]
    assert isinstance(response["result"], str)
    assert response["result"].startswith("[[0, 0], [1, 1]" if name == "matrix" else '{"n": ')


async def test_a_step_whose_record_cannot_be_stored_ends_its_run_with_the_reason(
    db: DocumentDB, prefix: str,
) -> None:
    """The model asks for a call with arrays in arrays: its step cannot be recorded, so the run
    ends failed, saying why, and is not left running."""
    _, run, _ = await run_on(db, prefix, [calls_turn([("matrix", {"rows": [[1, 2]]})]),
                                              text_turn("never")], "bad-args")
    assert run.status is RunStatus.FAILED, run
    assert run.error is not None and run.error.startswith("invalid_write:"), run.error


async def test_the_most_events_of_the_largest_size_leave_the_run_small_and_endable(
    store: AgentStore, prefix: str,
) -> None:
    """64 events of 16 KiB each as Firestore counts them (a list of zeros: 4 KB of JSON each)
    would be 1 MiB inside the run; they are kept beside it, and the run still ends."""
    payload = {"z": [0] * 2040}
    assert value_size(payload) <= MAX_EVENT_PAYLOAD_BYTES < 4 * len(str(payload))
    check_event_payload(payload)
    run = RunRecord(run_id=f"{prefix}r", request_id="q", request_hash="h",
                    conversation_id=f"{prefix}c", agent="default", text="hi", model="m",
                    created_at=1.0, limits=RunLimits(max_steps=5, max_seconds=60,
                                                     max_tool_calls=5))
    await store.runs.create_run(run)
    for n in range(MAX_RECEIVED_EVENTS):
        kept, recorded, _ = await store.waits.receive_event(
            run.run_id, f"e{n}", ReceivedEvent(payload=payload, by="alice", at=2.0 + n))
        assert recorded and kept.payload == payload
    with pytest.raises(DecisionRefused) as refused:
        await store.waits.receive_event(run.run_id, "one-more", ReceivedEvent(by="alice", at=99.0))
    assert refused.value.reason == "too_many_events"

    read = await store.runs.read_run(run.run_id)
    assert read is not None
    assert document_size(read.snapshot.path, read.snapshot.data) < 64 * 1024
    mark = read.record.received["e7"]
    assert mark.payload == {} and mark.digest is not None
    assert (await store.waits.event_payload(run.run_id, "e7", mark)).payload == payload
    again, recorded, _ = await store.waits.receive_event(
        run.run_id, "e7", ReceivedEvent(payload=payload, by="alice", at=500.0))
    assert not recorded and again.payload == payload and again.at == 9.0
    with pytest.raises(DecisionRefused) as other:
        await store.waits.receive_event(run.run_id, "e7", ReceivedEvent(payload={"z": [1]}, by="b",
                                                                        at=501.0))
    assert other.value.reason == "already_received"

    end = RunEnd(status=RunStatus.COMPLETED, stop_reason=StopReason.ANSWERED, answer="done")
    ended = await store.runs.end_run_now(run.run_id, end, 600.0)
    assert ended is not None
    final = await store.runs.get_run(run.run_id)
    assert final is not None and final.status is RunStatus.COMPLETED and final.answer == "done"
