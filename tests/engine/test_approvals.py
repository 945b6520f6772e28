"""A tool call that needs approval waits with no process, no lease and no redelivery, and
resumes through its ordinary message once decided; its deadline is the sweeper's.

Driven through the real dispatch on the in-memory store, with a manual clock.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel

from ackloop.config.settings import Settings
from ackloop.docdb.base import Write
from ackloop.domain.keys import StepKey, run_id_for_request
from ackloop.domain.records import RunStatus, StepDecision, StepStatus
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine.ending import cancel_run
from ackloop.engine.sweep import sweep
from ackloop.engine.waits import core as waits
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import DAY_SECONDS, EXPIRE_AT, AgentStore, DecisionRefused, Retention
from ackloop.tools import ToolSet, text_tool, tool, typed_tool
from tests.engine.fakes import api_of, make_loop
from tests.engine.test_guarantees import deliver_all, take

SETTINGS = Settings()


def transfer_tools(sent: list[dict[str, Any]], *, timeout: float | None = None) -> ToolSet:
    @tool(requires_approval=lambda args: args.get("amount", 0) > 100,
          approval_timeout_seconds=timeout)
    def transfer(to: str, amount: int) -> str:
        """Send money."""
        sent.append({"to": to, "amount": amount})
        return f"sent {amount} to {to}"

    @tool
    def balance() -> int:
        """The balance."""
        return 1000

    return ToolSet([transfer, balance])


def model(*calls: tuple[str, dict[str, Any]]) -> ScriptedModel:
    return ScriptedModel.from_turns([calls_turn(list(calls)), text_turn("done")])


async def started(loop, request_id: str) -> str:  # type: ignore[no-untyped-def]
    await loop.submit(QueryMessage(request_id=request_id, text="pay Bob"))
    await loop.run_until_idle()
    return run_id_for_request(request_id)


async def transfer_run(request_id: str, sent: list[dict[str, Any]], *, amount: int = 500,
                       timeout: float | None = None):  # type: ignore[no-untyped-def]
    """A run whose model asks to transfer ``amount`` once (a call over 100 waits)."""
    loop = make_loop(model(("transfer", {"to": "bob", "amount": amount})),
                     transfer_tools(sent, timeout=timeout), settings=SETTINGS)
    return loop, await started(loop, request_id)


def tool_result(loop, run_id: str, index: int = 0):  # type: ignore[no-untyped-def]
    return loop.deps.store.steps.get_steps(run_id, [str(StepKey.tool(0, index))])


async def test_a_call_that_needs_approval_waits_then_runs_with_the_edited_args() -> None:
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("approve", sent)
    (step,) = await tool_result(loop, run_id)
    assert step.status is StepStatus.WAITING and step.waiting is not None
    assert step.waiting.tool == "transfer" and step.lease_expires_at == 0.0
    assert step.waiting.deadline == step.waiting.since + SETTINGS.approval_timeout_seconds
    assert sent == [] and not loop.queued()  # acknowledged: nothing runs, nothing is queued
    (notice,) = loop.notices
    assert (notice.run_id, notice.step, notice.tool) == (run_id, step.key, "transfer")
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING
    # The sweeper, which resumes runs idle for sweep_stale_seconds, looks again at the deadline.
    assert run.progress_at == step.waiting.deadline - SETTINGS.sweep_stale_seconds

    decision = StepDecision(decision="approve", args={"to": "bob", "amount": 300},
                            by="alice", at=loop.deps.clock.now())
    _, decided = await waits.resolve(loop.deps, run_id, step.key, decision)
    assert decided
    await loop.run_until_idle()
    assert sent == [{"to": "bob", "amount": 300}]
    (answer,) = loop.answers
    assert answer.status == "completed" and answer.answer == "done"
    (step,) = await tool_result(loop, run_id)
    assert step.status is StepStatus.COMPLETED and step.decision == decision
    assert step.attempts == 1


async def test_a_rejection_is_the_result_the_model_reads_and_the_tool_never_runs() -> None:
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("reject", sent)
    await waits.resolve(loop.deps, run_id, str(StepKey.tool(0, 0)), StepDecision(
        decision="reject", comment="too much", by="alice", at=loop.deps.clock.now()))
    await loop.run_until_idle()
    (step,) = await tool_result(loop, run_id)
    assert sent == [] and step.result is not None
    assert step.result["response"] == {"error": "not run: rejected by alice (too much)"}
    assert loop.answers[0].status == "completed"


async def test_the_first_decision_wins_and_the_same_one_again_is_idempotent() -> None:
    loop, run_id = await transfer_run("conflict", [])
    key = str(StepKey.tool(0, 0))
    first = StepDecision(decision="approve", by="alice", at=1.0)
    await waits.resolve(loop.deps, run_id, key, first)
    step, decided = await waits.resolve(loop.deps, run_id, key, first.model_copy(
        update={"at": 2.0}))
    assert not decided and step.decision == first
    with pytest.raises(DecisionRefused) as refused:
        await waits.resolve(loop.deps, run_id, key, StepDecision(decision="reject", by="bo",
                                                                   at=3.0))
    assert refused.value.reason == "already_decided"
    with pytest.raises(DecisionRefused) as missing:
        await waits.resolve(loop.deps, run_id, str(StepKey.tool(0, 5)), first)
    assert missing.value.reason == "not_found"


async def test_parallel_calls_one_waits_one_runs_and_the_join_holds_until_the_decision() -> None:
    sent: list[dict[str, Any]] = []
    loop = make_loop(model(("transfer", {"to": "bob", "amount": 500}), ("balance", {})),
                     transfer_tools(sent))
    run_id = await started(loop, "parallel")
    waiting, ran = await loop.deps.store.steps.get_steps(
        run_id, [str(StepKey.tool(0, 0)), str(StepKey.tool(0, 1))])
    assert waiting is not None and waiting.status is StepStatus.WAITING
    assert ran is not None and ran.status is StepStatus.COMPLETED
    (next_model,) = await loop.deps.store.steps.get_steps(run_id, [str(StepKey.model(1))])
    assert next_model is None and not loop.answers  # the join did not fire
    await waits.resolve(loop.deps, run_id, waiting.key, StepDecision(
        decision="approve", by="alice", at=loop.deps.clock.now()))
    await loop.run_until_idle()
    assert sent == [{"to": "bob", "amount": 500}]
    assert loop.answers[0].answer == "done"


async def test_a_call_under_the_policy_runs_without_waiting() -> None:
    sent: list[dict[str, Any]] = []
    loop, _ = await transfer_run("small", sent, amount=5)
    assert sent == [{"to": "bob", "amount": 5}] and not loop.notices


async def test_a_wait_past_its_deadline_is_rejected_by_the_sweeper() -> None:
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("deadline", sent, timeout=3600)
    loop.deps.clock.advance(3000)  # type: ignore[attr-defined]
    assert [s.action for s in await sweep(loop.deps)] == []  # not idle: it waits
    loop.deps.clock.advance(601)  # type: ignore[attr-defined]
    (swept,) = await sweep(loop.deps)
    assert swept.action == "resumed"
    await loop.run_until_idle()
    (step,) = await tool_result(loop, run_id)
    assert sent == [] and step.result is not None
    assert step.result["response"] == {"error": "not run: no decision before the deadline"}
    run = await loop.deps.store.runs.get_run(run_id)
    # The run's max_seconds (300 s) does not count the hour it waited for a person.
    assert run is not None and run.status is RunStatus.COMPLETED and run.answer == "done"


async def test_an_approval_after_the_deadline_rejects_the_call_instead_of_running_it() -> None:
    """R7: an approval posted after the wait's deadline (before any sweep) ran the call. Now
    it is not recorded: the step is rejected as at its deadline, the call never runs, the run's
    waited time stops at the deadline, and the API says why (409 deadline_passed)."""
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("late", sent, timeout=600)
    (waiting,) = await tool_result(loop, run_id)
    assert waiting.waiting is not None
    loop.deps.clock.advance(601)  # type: ignore[attr-defined]
    step, _ = await waits.resolve(loop.deps, run_id, waiting.key, StepDecision(
        decision="approve", by="alice", at=loop.deps.clock.now()))
    assert step.decision is not None
    assert (step.decision.decision, step.decision.by, step.decision.at) == (
        "reject", "deadline", waiting.waiting.deadline)
    await loop.run_until_idle()
    (step,) = await tool_result(loop, run_id)
    assert sent == [] and step.result is not None
    assert step.result["response"] == {"error": "not run: no decision before the deadline"}
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.COMPLETED
    assert run.waited_seconds == pytest.approx(waiting.waiting.deadline - waiting.waiting.since)

    loop2, run2 = await transfer_run("late-api", sent, timeout=600)
    (waiting2,) = await tool_result(loop2, run2)
    loop2.deps.clock.advance(601)  # type: ignore[attr-defined]
    async with api_of(loop2) as api:
        late = await api.post(f"/runs/{run2}/approvals/{waiting2.key}",
                              json={"decision": "approve"})
    assert late.status_code == 409 and late.json()["code"] == "deadline_passed", late.text
    await loop2.run_until_idle()
    assert sent == []


async def test_a_cancel_between_the_read_and_the_waiting_commit_is_not_dropped() -> None:
    """R1: a cancel that landed while a tool step was recording its wait was dropped: the
    waiting commit failed on the run's new version, its retry waited anyway, and the cancel's
    rejection pass had found the step still running. The run waited until its deadline. Now
    the step reads the cancel, does not wait, the call is not made, and the run ends
    cancelled at once."""
    sent: list[dict[str, Any]] = []
    loop = make_loop(model(("transfer", {"to": "bob", "amount": 500})), transfer_tools(sent),
                     settings=SETTINGS)
    store = loop.deps.store
    wait_step = store.waits.wait_step
    raced: list[bool] = []

    async def racing_wait_step(*args: Any, **kwargs: Any) -> None:
        if not raced:
            raced.append(True)
            await cancel_run(loop.deps, run_id_for_request("cancel-race"))
        await wait_step(*args, **kwargs)

    store.waits.wait_step = racing_wait_step  # type: ignore[method-assign]
    await loop.submit(QueryMessage(request_id="cancel-race", text="pay Bob"))
    await loop.run_until_idle()
    assert raced and sent == [] and not loop.notices
    run = await store.runs.get_run(run_id_for_request("cancel-race"))
    assert run is not None and run.status is RunStatus.CANCELLED, run
    (step,) = await tool_result(loop, run.run_id)
    assert step is not None and step.waiting is None
    assert step.result is not None
    assert step.result["response"] == {"error": "not run: the run was cancelled"}


async def test_a_decision_whose_resend_was_lost_is_resent_by_the_sweeper() -> None:
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("lost-resend", sent)
    key = str(StepKey.tool(0, 0))
    await loop.deps.store.waits.decide_step(run_id, key, StepDecision(
        decision="approve", by="alice", at=loop.deps.clock.now()))  # no re-send: "crashed"
    loop.deps.clock.advance(SETTINGS.sweep_stale_seconds - 1)  # type: ignore[attr-defined]
    assert await sweep(loop.deps) == []
    loop.deps.clock.advance(2)  # type: ignore[attr-defined]
    (swept,) = await sweep(loop.deps)
    assert swept.action == "resumed" and key in swept.detail
    await loop.run_until_idle()
    assert sent == [{"to": "bob", "amount": 500}]
    assert loop.answers[0].status == "completed"


async def test_a_decision_made_while_the_sweeper_reschedules_a_waiting_run_is_not_pushed_back(
) -> None:
    """R2: the sweeper's waiting pass wrote ``progress_at`` (to the wait's deadline) whatever
    had happened since its read: a decision made in between, whose re-send was lost, was put
    off to the deadline (an hour here). The write is now fenced on the ``progress_at`` the
    sweeper read, so the decision keeps its time and the next sweep re-sends it."""
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("r2", sent, timeout=3600)
    store, key = loop.deps.store, str(StepKey.tool(0, 0))
    stale = SETTINGS.sweep_stale_seconds
    loop.deps.clock.advance(stale + 20)  # type: ignore[attr-defined]
    now = loop.deps.clock.now()
    # An idle run whose wait's deadline is far: the sweeper's waiting pass reschedules it.
    await store.db.commit([Write("update", store.run_path(run_id),
                                 {"progress_at": now - stale - 10})])
    list_steps = store.steps.list_steps
    decided: list[bool] = []

    async def deciding_meanwhile(run: str) -> Any:
        steps = await list_steps(run)
        if not decided:  # after the sweeper read the steps, before it writes
            decided.append(True)
            await store.waits.decide_step(run_id, key, StepDecision(
                decision="approve", by="alice", at=loop.deps.clock.now()))  # re-send lost
        return steps

    store.steps.list_steps = deciding_meanwhile  # type: ignore[method-assign]
    (first,) = await sweep(loop.deps)
    store.steps.list_steps = list_steps  # type: ignore[method-assign]
    assert decided and first.action == "waiting", first
    run = await store.runs.get_run(run_id)
    assert run is not None and run.progress_at == now  # the decision's time, kept

    loop.deps.clock.advance(stale + 1)  # type: ignore[attr-defined]
    (second,) = await sweep(loop.deps)
    assert second.action == "resumed" and key in second.detail
    await loop.run_until_idle()
    assert sent == [{"to": "bob", "amount": 500}]


async def test_a_resent_waiting_step_runs_nothing_and_says_it_waits_again() -> None:
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("duplicate", sent)
    (model_step,) = await loop.deps.store.steps.get_steps(run_id, [str(StepKey.model(0))])
    assert model_step is not None
    from ackloop.engine.outbox_sending import send
    await send(loop.deps, run_id, model_step.outbox)
    await loop.run_until_idle()
    (step,) = await tool_result(loop, run_id)
    assert sent == [] and step is not None and step.status is StepStatus.WAITING
    assert step.attempts == 1 and len(loop.notices) == 2


async def test_a_dead_letter_of_a_waiting_step_leaves_the_run_waiting() -> None:
    from ackloop.bus.memory import Published

    loop, run_id = await transfer_run("dead-letter", [])
    (model_step,) = await loop.deps.store.steps.get_steps(run_id, [str(StepKey.model(0))])
    assert model_step is not None
    (entry,) = model_step.outbox
    forwarded = Published(loop.deps.settings.dead_letter_topic,
                          json.dumps(entry.data).encode(),
                          {"run_id": run_id, "step": str(entry.target_step),
                           "CloudPubSubDeadLetterSourceDeliveryCount": "10"}, "dl-wait")
    outcome = await loop.deliver("dead_letter", forwarded)
    assert outcome.body.get("verdict") == "duplicate" and outcome.body["run_failed"] is False
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.RUNNING


class PayArgs(BaseModel):
    amount: int


def pay(args: PayArgs) -> None:
    """Pay."""


def test_every_way_to_make_a_tool_takes_an_approval_policy() -> None:
    def failing_policy(args: dict[str, Any]) -> bool:
        raise KeyError("amount")

    typed = typed_tool("pay", "Pay.", PayArgs, pay, requires_approval=True,
                       approval_timeout_seconds=60)
    text = text_tool("note", "Note.", lambda text: text, requires_approval=failing_policy)
    assert typed.needs_approval({}) and typed.approval_timeout_seconds == 60
    assert text.needs_approval({"text": "x"})  # a policy that fails asks a person
    with pytest.raises(ValueError, match="approval_timeout_seconds"):
        tool(approval_timeout_seconds=0)(pay)


async def test_cancelling_a_waiting_run_ends_it_without_running_the_call() -> None:
    from ackloop.engine.ending import cancel_run

    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("cancel", sent)
    await cancel_run(loop.deps, run_id)
    await loop.run_until_idle()
    run = await loop.deps.store.runs.get_run(run_id)
    assert run is not None and run.status is RunStatus.CANCELLED and sent == []
    (step,) = await tool_result(loop, run_id)
    assert step.decision is not None and step.decision.by == waits.CANCEL


async def test_the_delivery_that_recorded_the_wait_is_in_the_steps_cost() -> None:
    loop, run_id = await transfer_run("cost-wait", [])
    (waiting,) = await tool_result(loop, run_id)
    assert waiting is not None and waiting.wait_cost is not None
    # Its claim, its waiting commit (the step and the run) and the notice it published.
    assert waiting.wait_cost.firestore_writes == 3 and waiting.wait_cost.pubsub_bytes >= 2000
    await waits.resolve(loop.deps, run_id, waiting.key, StepDecision(
        decision="approve", by="alice", at=loop.deps.clock.now()))
    await loop.run_until_idle()
    (done,) = await tool_result(loop, run_id)
    plain_loop, plain_run = await transfer_run("cost-plain", [], amount=5)
    (plain,) = await tool_result(plain_loop, plain_run)
    assert done is not None and done.cost is not None and plain is not None
    assert plain.cost is not None
    # Two deliveries paid for the approved call, the waiting one and the resuming one.
    assert (done.cost.requests, plain.cost.requests) == (2, 1)
    assert done.cost.firestore_writes >= plain.cost.firestore_writes + 3
    assert done.cost.pubsub_bytes >= plain.cost.pubsub_bytes + waiting.wait_cost.pubsub_bytes
    run = await loop.deps.store.runs.get_run(run_id)
    other = await plain_loop.deps.store.runs.get_run(plain_run)
    assert run is not None and other is not None and run.cost and other.cost
    assert run.cost.usd > other.cost.usd


# -- rules the suite did not pin (each test fails if its rule is broken) ---------------------------


async def test_no_decision_is_recorded_on_a_run_that_has_ended() -> None:
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("ended", sent)
    assert await loop.deps.store.runs.fail_run(run_id, "dead_lettered: gone", loop.deps.clock.now())
    with pytest.raises(DecisionRefused) as refused:
        await loop.deps.store.waits.decide_step(run_id, str(StepKey.tool(0, 0)), StepDecision(
            decision="approve", by="alice", at=loop.deps.clock.now()))
    assert refused.value.reason == "run_ended"
    (step,) = await tool_result(loop, run_id)
    assert step is not None and step.decision is None and sent == []


async def test_the_sweeper_leaves_a_wait_alone_before_its_deadline() -> None:
    """An idle run whose only call waits, an hour before its deadline: the sweeper reports it
    waiting and decides nothing."""
    sent: list[dict[str, Any]] = []
    loop, run_id = await transfer_run("not-yet", sent, timeout=7200)
    loop.deps.clock.advance(SETTINGS.sweep_stale_seconds + 60)  # type: ignore[attr-defined]
    store = loop.deps.store
    await store.db.commit([Write("update", store.run_path(run_id), {"progress_at": 0.0})])
    (swept,) = await sweep(loop.deps)
    assert swept.action == "waiting", swept
    (step,) = await tool_result(loop, run_id)
    assert step is not None and step.status is StepStatus.WAITING and step.decision is None


@pytest.mark.parametrize(("tool_timeout", "run_timeout"), [(600.0, 300.0), (300.0, 600.0)])
async def test_a_wait_lasts_the_shorter_of_the_tools_and_the_runs_timeout(
    tool_timeout: float, run_timeout: float,
) -> None:
    sent: list[dict[str, Any]] = []
    loop = make_loop(model(("transfer", {"to": "bob", "amount": 500})),
                     transfer_tools(sent, timeout=tool_timeout), settings=SETTINGS)
    await loop.submit(QueryMessage(request_id="short", text="pay Bob",
                                   options=RunOptions(approval_timeout_seconds=run_timeout)))
    await loop.run_until_idle()
    (step,) = await tool_result(loop, run_id_for_request("short"))
    assert step is not None and step.waiting is not None
    assert step.waiting.deadline - step.waiting.since == pytest.approx(300.0)


async def test_overlapping_waits_count_once_and_a_later_wait_keeps_the_earlier_deadline(
) -> None:
    """Two calls of one turn wait, the second one 100 s after the first: the run's clock (its
    ``progress_at``, when the sweeper looks) stays at the first deadline; decided 100 s and 150 s
    later, the run has waited 250 s of wall time in all, not the sum of both waits (400 s)."""
    sent: list[dict[str, Any]] = []
    loop = make_loop(model(("transfer", {"to": "bob", "amount": 500}),
                           ("transfer", {"to": "ada", "amount": 700})),
                     transfer_tools(sent, timeout=3600), settings=SETTINGS)
    await loop.submit(QueryMessage(request_id="overlap", text="pay both"))
    pending = take(loop)
    while not any(m.attributes.get("step") == "0000-tool-000" for m in pending):
        pending = await deliver_all(loop, pending)
    first, second = sorted(pending, key=lambda m: m.attributes["step"])
    await deliver_all(loop, [first])
    run_id = run_id_for_request("overlap")
    store = loop.deps.store
    after_first = (await store.runs.get_run(run_id)).progress_at  # type: ignore[union-attr]
    loop.deps.clock.advance(100)  # type: ignore[attr-defined]
    await deliver_all(loop, [second])
    assert (await store.runs.get_run(run_id)).progress_at == after_first  # type: ignore[union-attr]
    waits = await store.steps.get_steps(run_id, ["0000-tool-000", "0000-tool-001"])
    assert all(s is not None and s.status is StepStatus.WAITING for s in waits)
    assert waits[1].waiting.since - waits[0].waiting.since == 100  # type: ignore[union-attr]

    loop.deps.clock.advance(100)  # type: ignore[attr-defined]
    await store.waits.decide_step(run_id, "0000-tool-000", StepDecision(
        decision="approve", by="alice", at=loop.deps.clock.now()))
    loop.deps.clock.advance(50)  # type: ignore[attr-defined]
    await store.waits.decide_step(run_id, "0000-tool-001", StepDecision(
        decision="approve", by="alice", at=loop.deps.clock.now()))
    run = await store.runs.get_run(run_id)
    assert run is not None and run.waited_seconds == pytest.approx(250.0)


async def test_a_late_decision_does_not_count_again_time_an_overlapping_wait_counted() -> None:
    """Three calls of one turn wait from the same moment; the first one's deadline is 600 s
    away. The second is decided at +1000 s; the first one late, at +1200 s (recorded as at its
    deadline, +600 s); the third at +1500 s. The waits overlap: the run waited 1500 s of wall
    time, not 1900 (the late decision must not move back the point up to which time was
    counted)."""
    sent: list[dict[str, Any]] = []

    @tool(requires_approval=True, approval_timeout_seconds=600)
    def quick(to: str) -> str:
        """Short wait."""
        sent.append({"to": to})
        return "ok"

    @tool(requires_approval=True, approval_timeout_seconds=36_000)
    def slow(to: str) -> str:
        """Long wait."""
        sent.append({"to": to})
        return "ok"

    loop = make_loop(model(("quick", {"to": "a"}), ("slow", {"to": "b"}), ("slow", {"to": "c"})),
                     ToolSet([quick, slow]), settings=SETTINGS)
    await loop.submit(QueryMessage(request_id="late-overlap", text="x"))
    await loop.run_until_idle()
    run_id, store = run_id_for_request("late-overlap"), loop.deps.store
    clock = loop.deps.clock
    waits = await store.steps.get_steps(run_id, ["0000-tool-000", "0000-tool-001", "0000-tool-002"])
    assert all(s is not None and s.status is StepStatus.WAITING for s in waits)
    assert len({s.waiting.since for s in waits if s and s.waiting}) == 1
    start = clock.now()

    def approve() -> StepDecision:
        return StepDecision(decision="approve", by="alice", at=clock.now())

    clock.advance(1000)  # type: ignore[attr-defined]
    await store.waits.decide_step(run_id, "0000-tool-001", approve())
    clock.advance(200)  # type: ignore[attr-defined]
    late, _ = await store.waits.decide_step(run_id, "0000-tool-000", approve())
    assert late.decision is not None and late.decision.by == "deadline"
    clock.advance(300)  # type: ignore[attr-defined]
    await store.waits.decide_step(run_id, "0000-tool-002", approve())
    run = await store.runs.get_run(run_id)
    assert run is not None
    assert run.waited_seconds == pytest.approx(clock.now() - start) == pytest.approx(1500.0)


async def test_a_near_deadline_is_swept_on_time_when_another_call_of_the_turn_waits_longer(
) -> None:
    """Two calls of one turn wait: the first for 60 s (nearer than ``sweep_stale_seconds``, so
    it asks the sweeper to look at once), the second for 7 days. The second waiting commit
    keeps the earlier time: a sweep 200 s later rejects the first call at its deadline (it was
    put off by 7 days), and the second call keeps waiting."""
    sent: list[dict[str, Any]] = []

    @tool(requires_approval=True, approval_timeout_seconds=60)
    def quick(to: str) -> str:
        """Short wait."""
        sent.append({"to": to})
        return "ok"

    @tool(requires_approval=True, approval_timeout_seconds=7 * 86_400)
    def slow(to: str) -> str:
        """Long wait."""
        sent.append({"to": to})
        return "ok"

    loop = make_loop(model(("quick", {"to": "a"}), ("slow", {"to": "b"})),
                     ToolSet([quick, slow]), settings=SETTINGS)
    await loop.submit(QueryMessage(request_id="near-deadline", text="x"))
    await loop.run_until_idle()
    run_id, store = run_id_for_request("near-deadline"), loop.deps.store
    waits = await store.steps.get_steps(run_id, ["0000-tool-000", "0000-tool-001"])
    assert all(s is not None and s.status is StepStatus.WAITING for s in waits)

    loop.deps.clock.advance(200)  # type: ignore[attr-defined]
    swept = await sweep(loop.deps)
    assert [(s.run_id, s.action) for s in swept] == [(run_id, "resumed")], swept
    quick_step, slow_step = await store.steps.get_steps(run_id, ["0000-tool-000", "0000-tool-001"])
    assert quick_step is not None and quick_step.decision is not None
    assert (quick_step.decision.decision, quick_step.decision.by) == ("reject", "deadline")
    assert slow_step is not None and slow_step.decision is None and sent == []


async def test_a_wait_never_outlasts_the_documents_it_resumes_with() -> None:
    """With a retention of one day, a call whose tool would wait seven days waits one: at its
    deadline the turn's model step (and the transcript) that the resumed call needs still exist,
    since Firestore's TTL deletes them only a day and the longest run after their last write.
    A seven-day wait would resume a turn whose documents were deleted."""
    sent: list[dict[str, Any]] = []
    settings = Settings(retention_days=1)
    loop = make_loop(model(("transfer", {"to": "bob", "amount": 500})),
                     transfer_tools(sent, timeout=7 * 86_400), settings=settings)
    counting = loop.deps.store.db
    loop.deps.store = AgentStore(counting, retention=Retention.from_settings(settings))
    await loop.submit(QueryMessage(request_id="short-retention", text="pay"))
    await loop.run_until_idle()
    run_id = run_id_for_request("short-retention")
    (waiting,) = await loop.deps.store.steps.get_steps(run_id, ["0000-tool-000"])
    assert waiting is not None and waiting.waiting is not None
    assert waiting.waiting.deadline - waiting.waiting.since == DAY_SECONDS
    deadline = datetime.fromtimestamp(waiting.waiting.deadline, UTC)
    model_step = await counting.get_all([loop.deps.store.step_path(run_id, "0000-model")])
    chunks = await counting.list_all(loop.deps.store.transcript_collection(run_id))
    expiries = [s.data[EXPIRE_AT] for s in [*model_step, *chunks] if s is not None]
    assert len(expiries) == 2 and all(e > deadline for e in expiries), (expiries, deadline)
