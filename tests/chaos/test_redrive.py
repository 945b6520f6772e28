"""Re-driving dead letters, on the in-memory store and publisher."""

from __future__ import annotations

import base64
import json

from ackloop.bus.memory import MemoryPublisher
from ackloop.config.settings import Settings
from ackloop.docdb.base import Write
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import StepKey
from ackloop.domain.records import RunLimits, RunRecord, RunStatus
from ackloop.engine.redrive import redrive
from ackloop.store import AgentStore

SETTINGS = Settings(model_steps_topic="model-steps")
MESSAGE = json.dumps({"v": 1, "kind": "model", "run_id": "run-1", "turn": 0}).encode()


def run_record(run_id: str = "run-1") -> RunRecord:
    return RunRecord(run_id=run_id, request_id=f"req-{run_id}", request_hash="h",
                     conversation_id="conv-1", agent="default", text="hi", model="m",
                     created_at=100.0, limits=RunLimits(max_steps=5, max_seconds=60,
                                                        max_tool_calls=5))


async def dead_lettered_run(store: AgentStore) -> None:
    """A run whose first model step used up its deliveries, as the dead-letter function leaves
    it: step claimed and released with an error, run failed, dead letter recorded."""
    await store.runs.create_run(run_record())
    claim = await store.steps.claim_step("run-1", StepKey.model(0), "model", owner="a", now=100,
                                         lease_seconds=3)
    await store.steps.release_step(claim, error="ModelRetryableError: Gemini answered 500")
    await store.letters.record_dead_letter("m-1", {
        "message_id": "m-1", "origin": "model_steps", "run_id": "run-1", "step": "0000-model",
        "cause": "ModelRetryableError: Gemini answered 500",
        "data": base64.b64encode(MESSAGE).decode(), "attributes": {"run_id": "run-1"},
        "received_at": 101.0, "redriven_at": None,
    })
    await store.runs.fail_run("run-1", "dead_lettered: step 0000-model exhausted its delivery "
                              "attempts; cause: ModelRetryableError: Gemini answered 500", 101.0)


async def test_redrive_reopens_the_run_and_republishes_once() -> None:
    store, publisher, clock = AgentStore(MemoryDocumentDB()), MemoryPublisher(), ManualClock()
    await dead_lettered_run(store)

    done = await redrive(store, publisher, SETTINGS, clock)

    assert [r.outcome for r in done] == ["redriven"]
    run = await store.runs.get_run("run-1")
    assert run is not None and run.status is RunStatus.RUNNING and run.error is None
    conv = (await store.db.get_all([store.conversation_path("conv-1")]))[0]
    assert conv is not None and conv.data["active_run_id"] == "run-1"
    (step,) = await store.steps.get_steps("run-1", ["0000-model"])
    assert step is not None and step.attempts == 0  # a fresh attempt budget
    # The message as it was, marked re-driven (a completed step it finds sends again).
    assert [(m.topic, m.data, m.attributes) for m in publisher.messages] == [
        ("model-steps", MESSAGE, {"run_id": "run-1", "redriven": "1"})]
    # Already re-driven: a second redrive publishes nothing.
    assert await redrive(store, publisher, SETTINGS, clock) == []
    assert len(publisher.messages) == 1


async def test_a_run_that_ended_otherwise_is_not_reopened() -> None:
    store, publisher, clock = AgentStore(MemoryDocumentDB()), MemoryPublisher(), ManualClock()
    await dead_lettered_run(store)
    await store.db.commit([Write("update", store.run_path("run-1"),
                                 {"status": "completed", "error": None})])

    done = await redrive(store, publisher, SETTINGS, clock)

    assert [r.outcome for r in done] == ["run_finished"] and publisher.messages == []


async def test_conversation_moved_on_blocks_the_redrive() -> None:
    store, publisher, clock = AgentStore(MemoryDocumentDB()), MemoryPublisher(), ManualClock()
    await dead_lettered_run(store)
    await store.runs.create_run(run_record("run-2"))  # the conversation's next run

    done = await redrive(store, publisher, SETTINGS, clock)

    assert [r.outcome for r in done] == ["conversation_busy"] and publisher.messages == []
    run = await store.runs.get_run("run-1")
    assert run is not None and run.status is RunStatus.FAILED


async def test_dry_run_and_unknown_origin_publish_nothing() -> None:
    store, publisher, clock = AgentStore(MemoryDocumentDB()), MemoryPublisher(), ManualClock()
    await dead_lettered_run(store)
    await store.letters.record_dead_letter("junk", {"message_id": "junk", "origin": None,
                                                    "run_id": None, "data": "",
                                                    "received_at": 99.0, "redriven_at": None})

    done = await redrive(store, publisher, SETTINGS, clock, dry_run=True)

    assert sorted(r.outcome for r in done) == ["dry_run", "unknown_origin"]
    assert publisher.messages == []
