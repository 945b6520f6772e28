"""Forged pushes over real HTTP against a real stack (Firestore emulator, real processes).

A completed run's ledger is the reference: forged tool steps, model steps and dead letters
aimed at it are acknowledged with their reason, run no tool (the sandbox serves no request),
change nothing of the run, and write only their own record; malformed envelopes answer 400 and
odd message ids never reach a document path.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ackloop.domain.records import RunStatus
from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack, start_stack

pytestmark = [pytest.mark.emulator]


@pytest.fixture(scope="module")
def stack(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[RunningStack]:
    """A stack of this module's own: its forged messages and their records must not reach the
    tests that count what the shared stack's model was asked and what it recorded as poison."""
    running = start_stack(emulator_session, tmp_path_factory.mktemp("forged"))
    try:
        yield running
    finally:
        running.stop()


def push(stack: RunningStack, service: str, data: bytes | Any, message_id: str,
         **message: Any) -> httpx.Response:
    encoded = base64.b64encode(data).decode() if isinstance(data, bytes) else data
    body = {"message": {"data": encoded, "messageId": message_id, **message},
            "subscription": "projects/p/subscriptions/forged"}
    return httpx.post(f"http://127.0.0.1:{stack.state.ports[service]}/", json=body, timeout=60)


async def test_forged_pushes_run_nothing_and_change_nothing(stack: RunningStack) -> None:
    run_id = stack.ask("where am I?")
    run, steps = await stack.wait_run(run_id, timeout=90)
    assert run.status is RunStatus.COMPLETED, run.error
    store = stack.store()
    (tool_message,) = [o.data for o in steps[0].outbox if o.topic == "tool_steps"]
    served = stack.sandbox_stats().get("requests", 0)
    before = (run.model_dump(), [(s.key, s.status, s.attempts) for s in steps])
    tag = run_id[-8:]

    forged = {
        "tool_step": [tool_message | {"index": 1},
                      tool_message | {"call": tool_message["call"] | {"args": {"x": "y"}}},
                      tool_message | {"usage": {}}],
        "model_step": [{"run_id": run_id, "turn": 7}],
    }
    for service, bodies in forged.items():
        for i, body in enumerate(bodies):
            answer = push(stack, service, json.dumps(body).encode(), f"{tag}-{service}-{i}")
            assert answer.status_code == 200, answer.text
            assert answer.json()["reason"] == "unscheduled_step", answer.text
    letter = push(stack, "dead_letter", json.dumps({"run_id": run_id, "turn": 7}).encode(),
                  f"{tag}-dl")
    assert letter.status_code == 200 and letter.json()["verdict"] == "unscheduled", letter.text

    assert stack.sandbox_stats().get("requests", 0) == served
    after = await store.get_run(run_id)
    assert after is not None
    assert (after.model_dump(), [(s.key, s.status, s.attempts)
                                 for s in await store.list_steps(run_id)]) == before
    reasons = {p["message_id"]: p["reason"] for p in await store.letters.list_poison()}
    assert {k: v for k, v in reasons.items() if k.startswith(tag)} == {
        f"{tag}-tool_step-0": "unscheduled_step", f"{tag}-tool_step-1": "unscheduled_step",
        f"{tag}-tool_step-2": "unscheduled_step", f"{tag}-model_step-0": "unscheduled_step"}


@pytest.mark.parametrize(("message", "status"), [
    ({"attributes": ["run_id"]}, 400),
    ({"data": 12345}, 400),
    ({"messageId": "x" * 300}, 400),
    ({"messageId": "a/b/c"}, 200),
    ({"messageId": "__odd__"}, 200),
], ids=["list_attributes", "numeric_data", "long_id", "slashed_id", "reserved_id"])
def test_malformed_envelopes_answer_400_and_odd_ids_are_recorded(
    stack: RunningStack, message: dict[str, Any], status: int
) -> None:
    for service in ("ingest", "model_step", "tool_step", "dead_letter"):
        fields = dict(message)
        message_id = fields.pop("messageId", f"m-{service}")
        data = fields.pop("data", b"not json")
        answer = push(stack, service, data, message_id, **fields)
        assert answer.status_code == status, (service, answer.text)


def test_a_dead_letter_over_1_mib_is_acknowledged(stack: RunningStack) -> None:
    answer = push(stack, "dead_letter", b"{" * (2 * 1024 * 1024), "huge-letter")
    assert answer.status_code == 200, answer.text
