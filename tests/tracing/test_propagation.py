"""Trace context rides on every published message (read back through a real Pub/Sub emulator
subscription), and the file exporter's format."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from google.cloud import pubsub_v1

from ackloop.bus.pubsub import PubSubPublisher
from ackloop.config.settings import Settings
from ackloop.domain.records import Outgoing
from ackloop.engine import outbox_sending
from ackloop.engine.outbox_entries import first_step, stamped
from ackloop.telemetry import tracing
from ackloop.telemetry.masking import register_secret
from tests.engine.fakes import CountingToolbox, make_loop
from tests.support.emulators import EmulatorSession
from tests.tracing.conftest import all_spans


def _subscribed(session: EmulatorSession) -> tuple[str, str]:
    topic_name, sub_name = session.unique("trace-topic"), session.unique("trace-sub")
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    topic = publisher.create_topic(name=publisher.topic_path(session.project_id,
                                                              topic_name)).name
    sub = subscriber.create_subscription(
        name=subscriber.subscription_path(session.project_id, sub_name), topic=topic).name
    return topic_name, sub


def _pull(subscription: str, count: int) -> list[dict[str, str]]:
    subscriber = pubsub_v1.SubscriberClient()
    got: list[dict[str, str]] = []
    for _ in range(20):
        response = subscriber.pull(subscription=subscription, max_messages=10, timeout=10)
        got += [dict(r.message.attributes) for r in response.received_messages]
        if len(got) >= count:
            break
    return got


@pytest.mark.emulator
async def test_published_messages_carry_the_step_spans_context_and_keep_it_on_a_resend(
    emulator_session: EmulatorSession, traces: Path,
) -> None:
    topic, subscription = _subscribed(emulator_session)
    loop = make_loop(None, CountingToolbox(),  # type: ignore[arg-type]  # nothing is called
                     settings=Settings(model_steps_topic=topic,
                                       project_id=emulator_session.project_id))
    loop.deps.publisher = PubSubPublisher(emulator_session.project_id)
    with tracing.delivery_span("model", {}, "run-a") as span:
        entries = stamped([first_step("run-a")])
        await outbox_sending.send(loop.deps, "run-a", entries)
        context = span.get_span_context()
    # The re-send of the committed entry, from another delivery (another span).
    with tracing.delivery_span("model", {}, "run-a"):
        await outbox_sending.send(loop.deps, "run-a", entries)

    first, resent = _pull(subscription, 2)
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-01"
    assert first == resent == {"run_id": "run-a", "step": "0000-model", "traceparent": expected}
    assert f"{context.trace_id:032x}" == tracing.run_trace_id("run-a")
    assert entries[0].traceparent == expected
    spans = all_spans(traces)
    assert [s["name"] for s in spans] == ["ackloop.model_step"] * 2, "no span per publish"
    publishes = [e for s in spans for e in s["events"] if e["name"] == "pubsub.publish"]
    assert len(publishes) == 2, "each publish is an event on its delivery's span"
    assert publishes[0]["attributes"]["messaging.destination.name"] == topic
    assert publishes[0]["attributes"]["messaging.batch.message_count"] == 1
    assert publishes[0]["attributes"]["duration_ms"] > 0


async def test_tracing_off_still_carries_the_callers_context() -> None:
    caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    loop = make_loop(None, CountingToolbox())  # type: ignore[arg-type]  # nothing is called
    with tracing.delivery_span("model", {"traceparent": caller}, "run-b"):
        await outbox_sending.send(loop.deps, "run-b", [Outgoing(topic="answers", data={})])
    (sent,) = loop.publisher.take()
    assert sent.attributes["traceparent"] == caller


def test_a_trace_file_holds_one_json_span_per_line(traces: Path) -> None:
    with tracing.delivery_span("tool", {}, "run-c", {"ackloop.step": "0000-tool-000"}) as step:
        tracing.claimed("0000-tool-000", 2, "taken_over", 1.5)
        with tracing.span("tool lookup", {"ackloop.tool": "lookup"}):
            pass
        tracing.answered(step, 503)
    tracing.force_flush()
    (path,) = traces.glob("*.jsonl")
    assert path.name.endswith(".jsonl") and path.name.rsplit("-", 1)[1] != ""
    (parent,) = (json.loads(line) for line in path.read_text().splitlines())
    assert set(parent) == {"trace_id", "span_id", "parent_span_id", "name", "service", "start",
                           "end", "attributes", "events", "status"}
    assert parent["name"] == "ackloop.tool_step"
    assert parent["trace_id"] == tracing.run_trace_id("run-c")
    assert parent["parent_span_id"] == tracing.run_root_span_id("run-c")
    assert {k: parent["attributes"][k] for k in ("ackloop.run_id", "ackloop.attempt",
                                                  "ackloop.claim", "ackloop.outcome")} == {
        "ackloop.run_id": "run-c", "ackloop.attempt": 2, "ackloop.claim": "taken_over",
        "ackloop.outcome": "redelivered"}
    lease, takeover, tool = parent["events"]
    assert [(e["name"], e["attributes"]) for e in (lease, takeover)] == [
        ("lease wait", {"seconds": 1.5}), ("takeover", {"attempt": 2})]
    assert tool["name"] == "tool lookup" and tool["attributes"]["ackloop.tool"] == "lookup"
    assert 0 <= tool["attributes"]["duration_ms"] <= (parent["end"] - parent["start"]) * 1000
    assert parent["status"]["code"] == "ERROR"
    assert parent["start"] <= tool["time"] <= parent["end"]


def test_an_operation_that_raises_is_an_event_naming_the_error(traces: Path) -> None:
    with (pytest.raises(ConnectionError), tracing.delivery_span("model", {}, "run-d"),
          tracing.span("firestore.commit", {"ackloop.writes": 3})):
        raise ConnectionError("unavailable")
    (step,) = all_spans(traces)
    commit, escaped = step["events"]
    assert (commit["name"], escaped["name"]) == ("firestore.commit", "exception")
    assert {k: commit["attributes"][k] for k in ("ackloop.writes", "exception.type",
                                                  "exception.message")} == {
        "ackloop.writes": 3, "exception.type": "ConnectionError",
        "exception.message": "unavailable"}


def test_span_text_is_masked_like_logs_before_it_is_written(traces: Path) -> None:
    key = "AIza" + "x" * 35
    with tracing.delivery_span("model", {}, "run-e") as step:
        tracing.note(detail=f"called with api_key={key}")
        tracing.event("model retry", error=f"401 for https://user:hunter22@host/?key={key}")
        with tracing.span("tool fetch", {"url": f"https://host/?token={key}"}) as op:
            op.set_attribute("header", f"Authorization: Bearer {key}")
        tracing.answered(step, 500)
    tracing.force_flush()
    written = "".join(path.read_text() for path in traces.glob("*.jsonl"))
    assert key not in written and "hunter22" not in written
    (span,) = all_spans(traces)
    assert span["attributes"]["ackloop.detail"] == "called with api_key=***"
    assert [e["name"] for e in span["events"]] == ["model retry", "tool fetch"]


def test_a_secret_registered_later_is_masked_in_the_spans_from_then_on(traces: Path) -> None:
    value = f"plain-{uuid.uuid4().hex}"  # no secret's shape: masked only once registered
    with tracing.delivery_span("model", {}, "run-h"):
        tracing.note(detail=value)
    tracing.force_flush()  # masked and written before the secret is registered
    register_secret(value)
    with tracing.delivery_span("model", {}, "run-h"):
        tracing.note(detail=value)
    first, second = all_spans(traces)
    assert (first["attributes"]["ackloop.detail"], second["attributes"]["ackloop.detail"]) == (
        value, "***")


def test_outside_a_delivery_an_operation_is_a_span_of_its_own(traces: Path) -> None:
    with tracing.run_context("run-f", None), tracing.span("pubsub.publish"):
        pass
    (publish,) = all_spans(traces)
    assert publish["name"] == "pubsub.publish"
    assert publish["trace_id"] == tracing.run_trace_id("run-f")
    assert publish["parent_span_id"] == tracing.run_root_span_id("run-f")


async def test_a_steps_messages_to_one_topic_go_in_one_request() -> None:
    loop = make_loop(None, CountingToolbox())  # type: ignore[arg-type]  # nothing is called
    entries = [Outgoing(topic="tool_steps", data={"n": n}, target_step=f"0000-tool-00{n}")
               for n in range(3)] + [Outgoing(topic="answers", data={})]
    await outbox_sending.send(loop.deps, "run-g", entries)
    sent = loop.publisher.take()
    assert loop.publisher.requests == 2, "one request per topic"
    assert sorted(m.attributes.get("step", "") for m in sent) == [
        "", "0000-tool-000", "0000-tool-001", "0000-tool-002"]
