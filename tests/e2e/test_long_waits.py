"""Waits that outlast every process, on a stack of real processes on the emulators: two runs
wait with every ackloop process stopped while days pass (the runs' clocks are moved back, as
if they had; nothing in the system keeps time but Firestore's documents). When the processes
come back, the sweeper leaves the run within its deadline alone and rejects the one past it;
the first's two parallel approvals are then decided one at a time, the join holding until the
second, and the days it waited do not count against its ``max_seconds``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from ackloop.docdb.base import Write
from ackloop.domain.records import RunStatus, StepStatus
from ackloop.store import AgentStore
from tests.cli.conftest import Cli
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

DAY = 86_400.0
ADA, BO = "0000-tool-000", "0000-tool-001"


async def _waiting(store: AgentStore, run_id: str, keys: list[str], timeout: float = 60
                   ) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = await store.steps.get_steps(run_id, keys)
        if all(s is not None and s.status is StepStatus.WAITING for s in steps):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{keys} of {run_id} never all waited")


async def _days_pass(store: AgentStore, run_id: str, days: float) -> None:
    """Move every time of the run and its steps back by ``days``: what the documents would
    hold had it waited that long."""
    shift = days * DAY
    run = await store.runs.get_run(run_id)
    assert run is not None
    writes = [Write("update", store.run_path(run_id), {
        "created_at": run.created_at - shift, "started_at": (run.started_at or 0) - shift,
        "progress_at": (run.progress_at or 0) - shift})]
    for step in await store.steps.list_steps(run_id):
        fields: dict[str, object] = {"created_at": step.created_at - shift,
                                     "started_at": step.started_at - shift}
        if step.completed_at is not None:
            fields["completed_at"] = step.completed_at - shift
        if step.waiting is not None:
            fields["waiting"] = step.waiting.model_copy(update={
                "since": step.waiting.since - shift,
                "deadline": step.waiting.deadline - shift}).to_doc()
        writes.append(Write("update", store.step_path(run_id, step.key), fields))
    await store.db.commit(writes)


async def test_runs_left_waiting_for_days_with_no_process(processes_back: RunningStack,
                                                         tmp_path: Path) -> None:
    stack = processes_back
    store = stack.store()
    parallel = stack.ask("pay 40 to Ada and pay 30 to Bo", agent="approval-demo")
    forgotten = stack.ask("pay 99 to Cy", agent="approval-demo")
    await _waiting(store, parallel, [ADA, BO])
    await _waiting(store, forgotten, [ADA])

    stack.stop_every_process()
    await _days_pass(store, parallel, 3)  # within the 7-day default deadline
    await _days_pass(store, forgotten, 8)  # past it
    await asyncio.to_thread(stack.restart_every_process)

    async with httpx.AsyncClient(base_url=stack.state.api_url, timeout=30) as api:
        swept = {s["run_id"]: s for s in (await api.post("/sweep")).json()["swept"]}
        # The first run's documents say the sweeper need not look before its deadline.
        assert parallel not in swept, swept
        assert swept[forgotten] == {"run_id": forgotten, "action": "resumed",
                                    "detail": f"no decision before the deadline: {ADA}"}
        done, _ = await stack.wait_run(forgotten, timeout=90)
        assert done.status is RunStatus.COMPLETED, done.error
        assert "not run: no decision before the deadline" in (done.answer or "")

        approved = await api.post(f"/runs/{parallel}/approvals/{ADA}",
                                  json={"decision": "approve"})
        assert approved.status_code == 200, approved.text
        deadline = time.monotonic() + 60
        while True:
            (ada,) = await store.steps.get_steps(parallel, [ADA])
            if ada is not None and ada.status is StepStatus.COMPLETED:
                break
            assert time.monotonic() < deadline, ada
            await asyncio.sleep(0.2)
        await asyncio.sleep(2)  # the join had its chance: Bo's call still waits
        run = (await api.get(f"/runs/{parallel}")).json()
        assert [w["step"] for w in run["waiting"]] == [BO]
        assert [s["key"] for s in run["steps"]] == ["0000-model", ADA, BO]

    home = tmp_path / "home"
    home.mkdir()
    rejected = await asyncio.to_thread(Cli(home), "runs", "reject", parallel, BO, "--comment",
                                       "not this week", "--directory", stack.state.directory)
    assert rejected.returncode == 0, rejected.stderr
    run_record, _ = await stack.wait_run(parallel, timeout=90)
    assert run_record.status is RunStatus.COMPLETED, run_record.error
    answer = run_record.answer or ""
    assert '"amount": 40' in answer and '"status": "sent"' in answer
    assert "(not this week)" in answer and '"amount": 30' not in answer
    # Three days waited, none of them against the run's max_seconds (300 s).
    assert run_record.waited_seconds > 3 * DAY - 60
