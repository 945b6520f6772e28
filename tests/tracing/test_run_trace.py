"""One run is one connected trace whose step spans are its ledger: the real handlers, the
Firestore emulator, the file exporter."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from ackloop.bus.push import Delivery
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import QueryMessage
from ackloop.engine.dispatch import dispatch
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.telemetry import tracing
from ackloop.telemetry.trace_files import of_run, read_trace
from tests.engine.fakes import CountingToolbox, make_loop
from tests.support.emulators import EmulatorSession
from tests.tracing.conftest import all_spans

STEP_SPANS = ("ackloop.model_step", "ackloop.tool_step")


def two_lookups_then_answer() -> ScriptedModel:
    return ScriptedModel.from_turns([
        calls_turn([("lookup", {"key": "a"}), ("lookup", {"key": "b"})]),
        text_turn("done"),
    ])


@pytest.mark.emulator
async def test_one_run_is_one_connected_trace_whose_step_spans_are_its_ledger(
    emulator_session: EmulatorSession, traces: Path,
) -> None:
    loop = make_loop(two_lookups_then_answer(), CountingToolbox({"lookup": "42"}))
    loop.deps.store = AgentStore(FirestoreDocumentDB.connect(emulator_session.project_id),
                                 f"t{uuid.uuid4().hex[:10]}_")
    await loop.submit(QueryMessage(request_id="trace-1", text="go"))
    await loop.run_until_idle()
    run_id = run_id_for_request("trace-1")
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.trace_id == tracing.run_trace_id(run_id)

    spans = all_spans(traces)
    assert {s["trace_id"] for s in spans} == {run.trace_id}, "one trace, nothing else"
    ids = {s["span_id"] for s in spans}
    assert len(ids) == len(spans)
    roots = [s for s in spans if s["parent_span_id"] not in ids]
    assert [(r["name"], r["parent_span_id"], r["span_id"]) for r in roots] == [
        ("ackloop.run", None, tracing.run_root_span_id(run_id))]

    steps = await loop.deps.store.steps.list_steps(run_id)
    assert [s.key for s in steps] == ["0000-model", "0000-tool-000", "0000-tool-001",
                                      "0001-model"]
    traced = sorted(s["attributes"]["ackloop.step"] for s in spans if s["name"] in STEP_SPANS)
    assert traced == [s.key for s in steps], "one step span per delivery, one per step"
    expected = ["ackloop.run", "ackloop.ingest", "ackloop.model_step", "ackloop.tool_step",
                "ackloop.tool_step", "ackloop.model_step"]
    assert sorted(s["name"] for s in spans) == sorted(expected), "one span per delivery"
    events = {s["attributes"]["ackloop.step"]: [e["name"] for e in s["events"]]
              for s in spans if s["name"] in STEP_SPANS}
    # What happened inside each step is an event of its span: the model call inside the model
    # step, the tool call inside the tool step, each step's commit.
    assert [events[k].count("gemini.generate_content") for k in ("0000-model", "0001-model")] \
        == [1, 1]
    assert [events[k].count("tool lookup") for k in ("0000-tool-000", "0000-tool-001")] == [1, 1]
    assert all(names.count("firestore.commit") == 1 for names in events.values())
    assert events["0000-model"].count("pubsub.publish") == 1, "the fan-out in one request"
    # The tool steps are children of the model step that asked for them; the join's model step
    # is a child of the tool step that completed the turn.
    by_id = {s["span_id"]: s for s in spans}
    parent_step = {s["attributes"]["ackloop.step"]: by_id[s["parent_span_id"]]
                   for s in spans if s["name"] in STEP_SPANS}
    assert parent_step["0000-model"]["name"] == "ackloop.ingest"
    assert parent_step["0000-tool-000"]["attributes"]["ackloop.step"] == "0000-model"
    assert parent_step["0000-tool-001"]["attributes"]["ackloop.step"] == "0000-model"
    assert parent_step["0001-model"]["name"] == "ackloop.tool_step"
    model_call = next(e for s in spans for e in s["events"]
                      if e["name"] == "gemini.generate_content")
    assert {"gen_ai.request.model", "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
            "duration_ms"} <= set(model_call["attributes"])
    assert read_trace(traces, str(run.trace_id)) == sorted(
        spans, key=lambda s: (s["start"], s["end"]))


async def test_a_redelivered_step_records_a_second_span_marked_as_a_redelivery(
    traces: Path,
) -> None:
    loop = make_loop(two_lookups_then_answer(), CountingToolbox({"lookup": "42"}))
    await loop.submit(QueryMessage(request_id="trace-again", text="go"))
    await loop.run_until_idle()
    run_id = run_id_for_request("trace-again")
    (first_delivery,) = [d.message for d in loop.deliveries("model")
                         if d.message.attributes.get("step") == "0000-model"]
    # Pub/Sub delivers the completed step's message a second time.
    outcome = await dispatch(loop.deps, "model", Delivery(
        message_id=first_delivery.message_id, data=first_delivery.data,
        attributes=first_delivery.attributes, delivery_attempt=2))
    assert outcome.acknowledged

    spans = [s for s in all_spans(traces) if s["name"] == "ackloop.model_step"
             and s["attributes"]["ackloop.step"] == "0000-model"]
    assert len(spans) == 2
    first, again = sorted(spans, key=lambda s: s["start"])
    assert first["attributes"]["ackloop.claim"] == "unclaimed"  # a unary call of an unpriced model
    assert first["attributes"]["ackloop.attempt"] == 1
    assert again["attributes"]["ackloop.claim"] == "completed"
    assert again["attributes"]["messaging.gcp_pubsub.message.delivery_attempt"] == 2
    assert [e["name"] for e in again["events"]] == ["redelivery of a completed step"]
    assert {s["attributes"]["ackloop.outcome"] for s in spans} == {"acknowledged"}
    assert {s["trace_id"] for s in spans} == {tracing.run_trace_id(run_id)}
    assert first["parent_span_id"] == again["parent_span_id"], "the same message, one parent"
    assert first["span_id"] != again["span_id"]


def test_a_runs_spans_are_found_by_the_run_not_by_the_trace_id_alone() -> None:
    """S4: two runs in one caller's trace; each run's spans are its root (ackloop.run), the
    spans naming it and those under them; the caller's span and the other run's are not."""
    def span(span_id: str, parent: str | None, run_id: str | None = None) -> dict[str, Any]:
        attributes = {"ackloop.run_id": run_id} if run_id else {}
        return {"span_id": span_id, "parent_span_id": parent, "attributes": attributes}

    a_root, b_root = tracing.run_root_span_id("run-a"), tracing.run_root_span_id("run-b")
    spans = [span("caller", None), span(a_root, "caller", "run-a"),
             span(b_root, "caller", "run-b"), span("a-ingest", a_root, "run-a"),
             span("b-ingest", b_root, "run-b"), span("a-sweep", a_root),
             span("a-sweep-child", "a-sweep"), span("b-step", "b-ingest", "run-b")]
    assert [s["span_id"] for s in of_run(spans, "run-a", a_root)] == [
        a_root, "a-ingest", "a-sweep", "a-sweep-child"]
    assert [s["span_id"] for s in of_run(spans, "run-b", b_root)] == [
        b_root, "b-ingest", "b-step"]


async def test_a_queued_follow_up_is_traced_in_its_own_trace(traces: Path) -> None:
    """R5: a queued follow-up's first step was sent by the previous run's end with that run's
    trace context, so every step of the follow-up was traced in the previous run's trace and
    its own held only its ingest. Its first step now carries its own run's context."""
    loop = make_loop(ScriptedModel.from_turns([
        calls_turn([("lookup", {"key": "a"})]), text_turn("first done"),
        calls_turn([("lookup", {"key": "b"})]), text_turn("second done")]),
        CountingToolbox({"lookup": "42"}))
    await loop.submit(QueryMessage(request_id="first", text="go"))
    first = run_id_for_request("first")
    await loop.submit(QueryMessage(request_id="second", text="then", conversation_id=first))
    await loop.run_until_idle()
    second = run_id_for_request("second")
    runs = [await loop.deps.store.runs.get_run(r) for r in (first, second)]
    assert [r.status for r in runs if r] == [RunStatus.COMPLETED] * 2
    spans = all_spans(traces)
    for run in runs:
        assert run is not None
        mine = [s for s in spans if s["attributes"].get("ackloop.run_id") == run.run_id]
        assert {s["name"] for s in mine} >= {"ackloop.ingest", "ackloop.model_step",
                                             "ackloop.tool_step"}, run.run_id
        assert {s["trace_id"] for s in mine} == {run.trace_id}, run.run_id
