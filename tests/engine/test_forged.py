"""Forged and hostile step messages: the engine executes only what its own ledger recorded.

Anyone who reaches a step function (push auth off) can send any envelope. Each forged case
checks what an operator would: nothing executed (the toolbox saw no call, the model no extra
request), the run's status and transcript unchanged, the message acknowledged with its reason
recorded in ``poison`` (or ``dead_letters``), and no step document written for it. The cases
whose guarantee depends on Firestore (paths, the 1 MiB limit) also run on the emulator.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ackloop.bus.memory import Published
from ackloop.bus.push import MalformedPush, decode_push
from ackloop.docdb.base import DocumentDB
from ackloop.domain.keys import StepKey, message_doc_id
from ackloop.domain.records import RunStatus, StepStatus, StopReason
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine.dispatch import Outcome
from ackloop.model.scripted import ScriptedModel
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from tests.engine import test_guarantees as guarantees
from tests.engine.fakes import CountingToolbox, make_loop
from tests.engine.test_guarantees import deliver, deliver_all, run_of, start, take
from tests.engine.test_holes import dead_letter
from tests.store.conftest import db, prefix  # noqa: F401  (fixtures: memory and the emulator)

# -- helpers -------------------------------------------------------------------------------------


def on(loop: InProcessLoop, db: DocumentDB, prefix: str) -> InProcessLoop:  # noqa: F811
    """``loop`` with its documents in ``db`` (memory or the Firestore emulator)."""
    loop.deps.store = AgentStore(db, prefix)
    return loop


def forge(message: Published, message_id: str, **changes: Any) -> Published:
    """``message`` with fields of its body replaced (``call`` fields merged into the call)."""
    body = json.loads(message.data)
    call = changes.pop("call", None)
    body |= changes
    if call is not None:
        body["call"] = body["call"] | call
    return Published(message.topic, json.dumps(body).encode(), dict(message.attributes),
                     message_id)


async def fan_out(loop: InProcessLoop, request_id: str) -> tuple[str, list[Published]]:
    """A run whose model step asked for two lookups (a, b) that have not run yet."""
    run_id, first = await start(loop, request_id)
    return run_id, await deliver_all(loop, [first])


async def state(loop: InProcessLoop, run_id: str) -> tuple[Any, ...]:
    """What a forged message must not change: the run, its steps, its transcript."""
    run = await run_of(loop, run_id)
    steps = await loop.deps.store.steps.list_steps(run_id)
    transcript = await loop.deps.store.transcript.load_transcript(run.conversation_id)
    return (run.model_dump(), [(s.key, s.status, s.attempts) for s in steps],
            transcript.contents, transcript.tail)


async def poison_reasons(loop: InProcessLoop) -> dict[str, str]:
    poison = await loop.deps.store.letters.list_poison()
    return {str(p["message_id"]): str(p["reason"]) for p in poison}


async def finish(loop: InProcessLoop, messages: list[Published]) -> None:
    """Deliver ``messages`` and everything they lead to."""
    while messages:
        messages = [m for m in await deliver_all(loop, messages)
                    if m.topic != loop.deps.settings.answers_topic]


def refused(outcome: Outcome, reason: str) -> None:
    assert outcome.status == 200 and outcome.body.get("acknowledged") is True, outcome
    assert outcome.body["reason"] == reason, outcome


# -- tool steps run the call the model step committed --------------------------------------------

FORGED_TOOL_STEPS: dict[str, tuple[dict[str, Any], str]] = {
    # The case: index 1 of the turn carrying call 0 (another call's name and args).
    "another_index": ({"index": 1}, "unscheduled_step"),
    "index_out_of_range": ({"index": 2}, "unscheduled_step"),
    "another_name": ({"call": {"name": "delete_everything"}}, "unscheduled_step"),
    "other_args": ({"call": {"args": {"key": "z"}}}, "unscheduled_step"),
    "another_call_count": ({"call_count": 3}, "unscheduled_step"),
    "lower_usage": ({"usage": {}}, "unscheduled_step"),
    "a_turn_whose_model_step_never_ran": ({"turn": 1}, "unscheduled_step"),
    "a_run_that_does_not_exist": ({"run_id": "run-nope"}, "unknown_run"),
}


@pytest.mark.parametrize("case", list(FORGED_TOOL_STEPS))
async def test_a_forged_tool_step_runs_nothing_and_changes_nothing(
    case: str, db: DocumentDB, prefix: str  # noqa: F811
) -> None:
    changes, reason = FORGED_TOOL_STEPS[case]
    model, tools = guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42",
                                                            "delete_everything": "gone"})
    loop = on(make_loop(model, tools), db, prefix)
    run_id, (tool_a, tool_b) = await fan_out(loop, f"forged-{case}")
    before = await state(loop, run_id)

    outcome = await deliver(loop, forge(tool_a, "forged-1", **changes))

    refused(outcome, reason)
    assert sum(tools.executed.values()) == 0 and model.calls == 1
    assert await state(loop, run_id) == before
    assert take(loop) == []
    assert (await poison_reasons(loop)) == {"forged-1": reason}
    if case == "a_run_that_does_not_exist":
        assert await loop.deps.store.steps.list_steps("run-nope") == []
    # The run goes on with the calls its model step committed.
    await finish(loop, [tool_a, tool_b])
    run = await run_of(loop, run_id)
    assert run.status is RunStatus.COMPLETED and run.answer == "done"
    assert dict(tools.executed) == {"lookup": 2}
    assert sorted(str(c.idempotency_key) for c in tools.contexts) == [
        f"{run_id}/0000-tool-000", f"{run_id}/0000-tool-001"]


async def test_a_tool_step_runs_the_args_the_model_committed() -> None:
    """The genuine message runs with the committed args (what the toolbox receives is the
    ledger's call, which the message must equal)."""
    seen: list[dict[str, Any]] = []

    class Recording(CountingToolbox):
        async def execute(self, call: Any, context: Any) -> Any:
            seen.append(dict(call.args))
            return await super().execute(call, context)

    loop = make_loop(guarantees.two_calls_then_answer(), Recording({"lookup": "42"}))
    _, (tool_a, tool_b) = await fan_out(loop, "committed-args")
    await deliver_all(loop, [tool_b, tool_a])
    assert seen == [{"key": "b"}, {"key": "a"}]


# -- model steps: only the turn the ledger scheduled, with the ledger's usage ----------------------


@pytest.mark.parametrize("turn", [1, 5])
async def test_a_model_step_for_a_turn_the_ledger_did_not_schedule_leaves_the_run_running(
    turn: int, db: DocumentDB, prefix: str  # noqa: F811
) -> None:
    """Turn 1 before the turn's tools have run, or a turn far ahead: refused, not failing the
    running run (it used to end it with transcript_inconsistent)."""
    model, tools = guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = on(make_loop(model, tools), db, prefix)
    run_id, first = await start(loop, f"future-{turn}")
    tool_a, tool_b = await deliver_all(loop, [first])
    before = await state(loop, run_id)

    outcome = await deliver(loop, forge(first, "forged-model", turn=turn))

    refused(outcome, "unscheduled_step")
    assert model.calls == 1 and await state(loop, run_id) == before
    assert await poison_reasons(loop) == {"forged-model": "unscheduled_step"}
    await finish(loop, [tool_a, tool_b])
    assert (await run_of(loop, run_id)).status is RunStatus.COMPLETED


async def test_usage_in_a_model_step_message_cannot_lower_the_token_budget() -> None:
    """The budget is checked against the ledger's usage: a message claiming no tokens were
    spent does not buy another model call past ``max_tokens``."""
    model, tools = guarantees.one_call_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    await loop.submit(QueryMessage(request_id="budget", text="go",
                                   options=RunOptions(max_tokens=1)))
    (first,) = await deliver_all(loop, take(loop))
    (tool,) = await deliver_all(loop, [first])
    (genuine,) = await deliver_all(loop, [tool])
    assert json.loads(genuine.data)["usage"]["total_tokens"] >= 1

    published = await deliver_all(loop, [forge(genuine, "cheap", usage={})])

    run = await run_of(loop, json.loads(genuine.data)["run_id"])
    assert run.status is RunStatus.COMPLETED and run.stop_reason is StopReason.MAX_TOKENS
    assert model.calls == 1 and guarantees.targets(published) == ["answer"]
    assert run.usage.total_tokens >= 1


POISON_BODIES: dict[str, dict[str, Any]] = {
    "negative_usage": {"usage": {"total_tokens": -1_000_000}},
    "negative_tool_calls": {"usage": {"tool_calls": -50}},
    "turn_beyond_the_key": {"turn": 10_000},
}


@pytest.mark.parametrize("case", list(POISON_BODIES))
async def test_values_a_step_key_or_a_budget_cannot_hold_are_poison(case: str) -> None:
    loop = make_loop(guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42"}))
    run_id, first = await start(loop, f"poison-{case}")
    outcome = await deliver(loop, forge(first, "bad", **POISON_BODIES[case]))
    refused(outcome, "poison_message")
    assert await loop.deps.store.steps.list_steps(run_id) == []


async def test_a_tool_index_beyond_the_key_is_poison() -> None:
    loop = make_loop(guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42"}))
    run_id, (tool_a, _) = await fan_out(loop, "poison-index")
    refused(await deliver(loop, forge(tool_a, "bad", index=1000, call_count=1000)),
            "poison_message")
    assert [s.key for s in await loop.deps.store.steps.list_steps(run_id)] == ["0000-model"]


async def test_a_step_of_a_run_that_does_not_exist_writes_only_its_poison_record(
    db: DocumentDB, prefix: str  # noqa: F811
) -> None:
    model, tools = guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = on(make_loop(model, tools), db, prefix)
    _, first = await start(loop, "exists")
    refused(await deliver(loop, forge(first, "nope", run_id="run-nope")), "unknown_run")
    assert await loop.deps.store.steps.list_steps("run-nope") == []
    assert await loop.deps.store.runs.get_run("run-nope") is None


# -- a step conflict acts on the run of the message's body --------------------------------------


async def test_a_step_conflict_fails_the_run_in_the_body_never_the_one_in_the_attributes(
) -> None:
    loop = make_loop(guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42"}))
    victim, _ = await fan_out(loop, "victim")
    run_id, (tool_a, _) = await fan_out(loop, "conflicted")
    # Another step is recorded at the key (what the conflict check exists for).
    await loop.deps.store.steps.claim_step(run_id, StepKey.tool(0, 0), "other", owner="x",
                                           now=loop.deps.clock.now(), lease_seconds=10.0)
    aimed = Published(tool_a.topic, tool_a.data, {"run_id": victim, "step": "0000-tool-000"},
                      "aimed")

    refused(await deliver(loop, aimed), "step_conflict")

    assert (await run_of(loop, victim)).status is RunStatus.RUNNING
    conflicted = await run_of(loop, run_id)
    assert conflicted.status is RunStatus.FAILED
    assert (conflicted.error or "").startswith("step_conflict")


# -- dead letters ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", ["future_model_turn", "tool_with_other_args", "unknown_run"])
async def test_a_forged_dead_letter_does_not_fail_the_run(case: str) -> None:
    model, tools = guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = make_loop(model, tools)
    run_id, first = await start(loop, f"dl-{case}")
    tool_a, tool_b = await deliver_all(loop, [first])
    letter = {
        "future_model_turn": forge(first, "x", turn=7),
        "tool_with_other_args": forge(tool_a, "x", call={"args": {"key": "z"}}),
        "unknown_run": forge(first, "x", run_id="run-nope"),
    }[case]
    before = await state(loop, run_id)

    outcome = await dead_letter(loop, letter, f"dl-{case}")

    assert outcome.status == 200 and outcome.body["verdict"] == "unscheduled", outcome
    assert outcome.body["run_failed"] is False
    assert await state(loop, run_id) == before and take(loop) == []
    (record,) = await loop.deps.store.letters.list_dead_letters()
    assert record.data["verdict"] == "unscheduled" and "left alone" in record.data["cause"]
    assert record.data["origin"] is None  # never re-driven
    await finish(loop, [tool_a, tool_b])
    assert (await run_of(loop, run_id)).status is RunStatus.COMPLETED


async def test_a_dead_letter_over_1_mib_is_recorded_cut_short_and_acknowledged(
    db: DocumentDB, prefix: str  # noqa: F811
) -> None:
    loop = on(make_loop(ScriptedModel(), CountingToolbox()), db, prefix)
    huge = Published(loop.deps.settings.tool_steps_topic, b"x" * (2 * 1024 * 1024), {}, "big")

    outcome = await dead_letter(loop, huge, "big")

    assert outcome.status == 200, outcome
    (record,) = await loop.deps.store.letters.list_dead_letters()
    assert record.data["data_truncated"] is True and record.data["data_bytes"] == 2 * 1024 * 1024
    assert record.data["origin"] is None  # cut short: never re-driven


async def test_a_reused_message_id_never_overwrites_a_dead_letter(
    db: DocumentDB, prefix: str  # noqa: F811
) -> None:
    loop = on(make_loop(ScriptedModel(), CountingToolbox()), db, prefix)
    topic = loop.deps.settings.model_steps_topic
    real = Published(topic, b'{"run_id": "run-a", "turn": 0}', {}, "1")
    other = Published(topic, b'{"run_id": "run-b", "turn": 0}', {}, "1")

    for letter in (real, real, other, other):
        assert (await dead_letter(loop, letter, "1")).status == 200

    records = {s.id: s.data for s in await loop.deps.store.letters.list_dead_letters()}
    assert len(records) == 2
    assert base64.b64decode(records["1"]["data"]) == real.data
    (kept,) = [r for key, r in records.items() if key != "1"]
    assert base64.b64decode(kept["data"]) == other.data


ODD_IDS = ["a/b/c", "..", ".", "__reserved__", "x" * 1600, "id with spaces", "ü/ß"]


async def test_message_ids_never_nest_or_break_a_path(
    db: DocumentDB, prefix: str  # noqa: F811
) -> None:
    loop = on(make_loop(ScriptedModel(), CountingToolbox()), db, prefix)
    topic = loop.deps.settings.model_steps_topic
    for message_id in ODD_IDS:
        poison = Published(topic, b"not json", {}, message_id)
        assert (await deliver(loop, poison)).status == 200
        assert (await dead_letter(loop, poison, message_id)).status == 200
    poison_ids = {str(p["message_id"]) for p in await loop.deps.store.letters.list_poison()}
    assert poison_ids == set(ODD_IDS)
    letters = {s.id for s in await loop.deps.store.letters.list_dead_letters()}
    assert letters == {message_doc_id(i) for i in ODD_IDS}
    assert all("/" not in i and not i.startswith("__") for i in letters)


# -- the envelope ---------------------------------------------------------------------------------


def envelope(**message: Any) -> bytes:
    return json.dumps({"message": {"messageId": "1", "data": "", **message},
                       "subscription": "s"}).encode()


@pytest.mark.parametrize("body", [
    envelope(attributes=["run_id", "x"]),
    envelope(attributes={"run_id": 5}),
    envelope(attributes={"k": "\ud800"}),
    envelope(data=12345),
    envelope(data={"a": 1}),
    envelope(messageId="a" * 257),
    envelope(messageId="line\nbreak"),
    envelope(messageId="\ud800"),
    envelope(messageId=7),
], ids=["list_attributes", "numeric_attribute", "surrogate_attribute", "numeric_data",
        "object_data", "long_id", "control_in_id", "surrogate_id", "numeric_id"])
def test_a_malformed_envelope_is_refused_as_not_from_pubsub(body: bytes) -> None:
    with pytest.raises(MalformedPush):
        decode_push(body, {})


@pytest.mark.parametrize("attempt", [2**63, -1, "3", True])
def test_a_delivery_attempt_that_is_not_a_count_is_dropped(attempt: Any) -> None:
    """It would otherwise reach a dead-letter record (Firestore holds 64-bit integers)."""
    body = json.loads(envelope())
    body["deliveryAttempt"] = attempt
    assert decode_push(json.dumps(body).encode(), {}).delivery_attempt is None


def test_a_well_formed_envelope_still_decodes() -> None:
    delivery = decode_push(envelope(data=base64.b64encode(b"{}").decode(),
                                    attributes={"run_id": "r"}, messageId="a/b"), {})
    assert (delivery.message_id, delivery.data, delivery.attributes) == ("a/b", b"{}",
                                                                          {"run_id": "r"})


async def test_steps_the_ledger_scheduled_still_complete_a_whole_run(
    db: DocumentDB, prefix: str  # noqa: F811
) -> None:
    """The checks refuse only what the ledger did not schedule: a whole run, duplicates
    included, completes on both stores."""
    model, tools = guarantees.two_calls_then_answer(), CountingToolbox({"lookup": "42"})
    loop = on(make_loop(model, tools), db, prefix)
    await loop.submit(QueryMessage(request_id="whole", text="go"))
    await loop.run_until_idle(duplicate_every=True)
    run = await run_of(loop, loop.answers[0].run_id)
    assert run.status is RunStatus.COMPLETED and await poison_reasons(loop) == {}
    steps = await loop.deps.store.steps.list_steps(run.run_id)
    assert all(s.status is StepStatus.COMPLETED for s in steps)
    assert (model.calls, tools.executed["lookup"]) == (2, 2)
