"""Gemini conversation fidelity and model-error handling through the durable loop.

The model is google-genai talking to the local Gemini-compatible server; every request body it
sent is read back from that server.
"""

from __future__ import annotations

import base64
import json

import pytest
from google.genai import types

from ackloop.domain.records import RunStatus
from ackloop.domain.wire import RunOptions
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


def _bodies_for(stack: RunningStack, marker: str) -> list[dict]:
    return [b for b in stack.model_requests()
            if json.dumps(b["contents"][0]).find(marker) >= 0]


def _decoded(signature: str) -> bytes:
    return base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))


async def test_exact_request_body_at_each_model_step(stack: RunningStack) -> None:
    question = "are there any weather alerts where I am? (fidelity-1)"
    run, steps = await stack.wait_run(stack.ask(question))
    assert run.status is RunStatus.COMPLETED
    bodies = _bodies_for(stack, "fidelity-1")
    assert len(bodies) == 4

    for body in bodies:
        assert "respond in haikus" in body["systemInstruction"]["parts"][0]["text"]
        names = [d["name"] for d in body["tools"][0]["functionDeclarations"]]
        assert sorted(names) == ["get_ip_address", "get_location_info", "get_weather_alerts"]

    roles = [[c["role"] for c in b["contents"]] for b in bodies]
    assert roles == [
        ["user"],
        ["user", "model", "user"],
        ["user", "model", "user", "model", "user"],
        ["user", "model", "user", "model", "user", "model", "user"],
    ]
    last = bodies[-1]["contents"]
    assert last[0] == {"role": "user", "parts": [{"text": question}]}
    calls = [p["functionCall"] for c in last if c["role"] == "model" for p in c["parts"]
             if "functionCall" in p]
    responses = [p["functionResponse"] for c in last if c["role"] == "user" for p in c["parts"]
                 if "functionResponse" in p]
    assert [c["name"] for c in calls] == ["get_ip_address", "get_location_info",
                                          "get_weather_alerts"]
    assert [r["name"] for r in responses] == [c["name"] for c in calls]
    assert calls[1]["args"] == {"ipaddress": "203.0.113.7"}
    assert responses[0]["response"] == {"result": "203.0.113.7"}

    # Each model turn's raw parts were stored and sent back byte for byte: the signature the
    # model gave at step N is the one the server received at every later step.
    stored = {s.key: s for s in steps}
    assert stored["0000-model"].result and stored["0000-model"].result["calls"][0]["name"] == (
        "get_ip_address")
    transcript = await stack.store().load_transcript(run.conversation_id)
    stored_sigs = [types.Part.model_validate(p).thought_signature
                   for c in transcript.contents if c["role"] == "model"
                   for p in c["parts"] if p.get("thought_signature")]
    sent_sigs = [_decoded(p["thoughtSignature"]) for c in last if c["role"] == "model"
                 for p in c["parts"] if "thoughtSignature" in p]
    assert len(sent_sigs) == 3 and sent_sigs == stored_sigs[:3]
    assert len(set(sent_sigs)) == 3


async def test_follow_up_question_continues_the_conversation(stack: RunningStack) -> None:
    first, _ = await stack.wait_run(stack.ask("what is my ip address? (turns-1)",
                                              conversation_id="conv-turns-1"))
    second, _ = await stack.wait_run(stack.ask("tell me a joke (turns-1)",
                                               conversation_id="conv-turns-1"))
    assert first.status is second.status is RunStatus.COMPLETED
    body = _bodies_for(stack, "turns-1")[-1]
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user", "model", "user"]
    assert body["contents"][-1]["parts"][0]["text"] == "tell me a joke (turns-1)"
    runs = await stack.store().list_runs("conv-turns-1")
    assert [r.run_id for r in runs] == [first.run_id, second.run_id]


async def test_structured_output_is_validated_and_corrected(stack: RunningStack) -> None:
    schema = {"type": "object",
              "properties": {"summary": {"type": "string"}, "alerts": {"type": "integer"}},
              "required": ["summary", "alerts"]}
    run, steps = await stack.wait_run(stack.ask(
        "are there any weather alerts for New York?",
        options=RunOptions(output_schema=schema)))
    assert run.status is RunStatus.COMPLETED
    assert set(run.output) == {"summary", "alerts"} and "NY" in run.output["summary"]
    feedback_steps = [s for s in steps if s.kind == "model" and (s.result or {}).get("feedback")]
    assert len(feedback_steps) == 1  # the first final_answer lacked "alerts" and was corrected


@pytest.mark.parametrize(
    ("faults", "status", "reason"),
    [
        ("429:1", RunStatus.COMPLETED, None),
        ("500*2", RunStatus.COMPLETED, None),
        ("safety", RunStatus.FAILED, "model_safety_block"),
        ("malformed", RunStatus.FAILED, "model_malformed_response"),
        ("400", RunStatus.FAILED, "model_invalid_request"),
        ("empty", RunStatus.FAILED, "model_empty_response"),
    ],
)
async def test_model_errors_are_classified(stack: RunningStack, faults: str, status: RunStatus,
                                           reason: str | None) -> None:
    stack.schedule_model_faults(faults)
    run, steps = await stack.wait_run(stack.ask(f"tell me a joke ({faults})"))
    assert run.status is status
    if reason is None:
        # Short retryable errors are waited out inside the one delivery: no nack, no redelivery.
        retries = int(faults.partition("*")[2] or 1)
        assert steps[0].attempts == 1 and run.answer
        assert (steps[0].result or {}).get("model_retries") == retries, steps[0]
        assert (steps[0].last_error or "").startswith("retried in the request"), steps[0]
    else:
        assert run.error is not None and run.error.startswith(reason), run.error
        assert steps[0].attempts == 1
