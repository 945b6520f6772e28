"""A caller's JSON values are bounded the way Firestore stores them (S5, S6): an event's payload
and an approval's edited arguments that nest too deep, hold an array in an array, or are larger
than allowed as Firestore sizes them (a number is 8 bytes, whatever its digits) are refused with
422 and what to fix, never a 500; an event published to the queries topic with such a payload
is acknowledged and recorded as poison. In-process API and engine, in memory."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ackloop.api.app import create_app
from ackloop.bus.memory import Published
from ackloop.config.settings import Settings
from ackloop.domain.records import StepStatus
from ackloop.domain.wire import MAX_PAYLOAD_DEPTH
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.engine.fakes import CountingToolbox, make_loop
from tests.engine.test_events import STEP, shipping_run


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"x": 1}
    for _ in range(levels - 1):
        value = {"n": value}
    return value


BAD_VALUES = {
    "thirty levels": (nested(30), "nests 30 levels"),
    "an array in an array": ({"rows": [[1, 2], [3, 4]]}, "an array holds an array"),
    "18 KiB of JSON, 72 KiB stored": ({"z": [0] * 9000}, "bytes as stored"),
}


@pytest.fixture
async def api() -> Any:
    loop = make_loop(ScriptedModel.from_turns([text_turn("hi")]), CountingToolbox())

    async def deps() -> Deps:
        return loop.deps

    app = create_app(Settings(api_auth="none"), deps=deps)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        yield client, loop


@pytest.mark.parametrize("case", list(BAD_VALUES))
async def test_an_event_payload_firestore_cannot_keep_is_a_422(api: Any, case: str) -> None:
    client, _ = api
    value, says = BAD_VALUES[case]
    answer = await client.post("/runs/run-0123456789abcdef0123/events/done",
                               json={"payload": value})
    assert answer.status_code == 422, answer.text
    assert says in answer.text


@pytest.mark.parametrize("case", list(BAD_VALUES))
async def test_edited_approval_args_firestore_cannot_keep_are_a_422(api: Any, case: str) -> None:
    client, _ = api
    value, says = BAD_VALUES[case]
    answer = await client.post("/runs/run-0123456789abcdef0123/approvals/0000-tool-000",
                               json={"decision": "approve", "args": value})
    assert answer.status_code == 422, answer.text
    assert says in answer.text


async def test_the_deepest_accepted_payload_is_stored_where_events_are_kept(api: Any) -> None:
    """Its bound leaves room for where it is kept: a step's decision holds it 2 levels down,
    within Firestore's 20."""
    client, _ = api
    answer = await client.post("/runs/run-0123456789abcdef0123/events/done",
                               json={"payload": nested(MAX_PAYLOAD_DEPTH)})
    assert answer.status_code == 404  # valid: refused only because the run does not exist
    assert MAX_PAYLOAD_DEPTH + 3 <= 20


@pytest.mark.parametrize("case", list(BAD_VALUES))
async def test_a_published_event_with_such_a_payload_is_poison(api: Any, case: str) -> None:
    _, loop = api
    value, says = BAD_VALUES[case]
    data = httpx.Request("POST", "http://x", json={
        "v": 1, "type": "event", "run_id": "run-0123456789abcdef0123", "name": "done",
        "payload": value}).content
    outcome = await loop.deliver("query", Published(loop.deps.settings.queries_topic, data, {},
                                                    f"m-{case}"))
    assert outcome.acknowledged and outcome.status == 200
    record = await loop.deps.store.letters.get_poison(f"m-{case}")
    assert record is not None and says in record["error"]


async def test_a_thirty_level_event_payload_to_a_waiting_run_is_refused_and_resumes_nothing(
) -> None:
    """S6 on a run that exists and waits for the event: the payload too deep for Firestore is
    answered 422 before anything is kept, and the waiting call stays waiting (it was accepted,
    and its tool ran, before the bound)."""
    seen: list[dict[str, Any]] = []
    loop, run_id = await shipping_run("deep", seen)

    async def deps() -> Deps:
        return loop.deps

    app = create_app(Settings(api_auth="none"), deps=deps)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        answer = await api.post(f"/runs/{run_id}/events/shipped:A7",
                                json={"payload": nested(30)})
    await loop.run_until_idle()
    assert answer.status_code == 422, answer.text
    assert "deep" in answer.text or "depth" in answer.text or "nest" in answer.text, answer.text
    (step,) = await loop.deps.store.get_steps(run_id, [STEP])
    assert step is not None and step.status is StepStatus.WAITING and seen == []
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.received == {}
