"""``ackloop ask`` stops following a run once what it waits for is settled: some call waits and
every other call of its turn has started and waits or is done. Stopping at the first waiting
call would not show a second one its turn was still starting."""

from __future__ import annotations

from ackloop.cli.follow import Followed
from ackloop.domain.records import Outgoing, RunLimits, RunRecord, StepRecord, StepStatus, Waiting

RUN = RunRecord(run_id="r", request_id="q", request_hash="h", conversation_id="r",
                agent="approval-demo", text="pay", model="m", created_at=0.0,
                limits=RunLimits(max_steps=10, max_seconds=300, max_tool_calls=10))


def _model(calls: int) -> StepRecord:
    outbox = [Outgoing(topic="tool_steps", data={}, target_step=f"0000-tool-{i:03d}")
              for i in range(calls)]
    return StepRecord(key="0000-model", kind="model", name="model", turn=0,
                      status=StepStatus.COMPLETED, outbox=outbox)


def _tool(index: int, status: StepStatus) -> StepRecord:
    waiting = (Waiting(tool="t", since=0, deadline=1) if status is StepStatus.WAITING
               else None)
    return StepRecord(key=f"0000-tool-{index:03d}", kind="tool", name="t", turn=0, index=index,
                      status=status, waiting=waiting)


def test_a_wait_is_settled_only_once_every_call_of_its_turn_waits_or_is_done() -> None:
    waiting = _tool(0, StepStatus.WAITING)
    assert not Followed("r", RUN, [_model(2)]).settled  # nothing waits yet
    assert not Followed("r", RUN, [_model(2), waiting]).settled  # the second call not started
    assert not Followed("r", RUN, [_model(2), waiting, _tool(1, StepStatus.RUNNING)]).settled
    assert Followed("r", RUN, [_model(2), waiting, _tool(1, StepStatus.WAITING)]).settled
    assert Followed("r", RUN, [_model(2), waiting, _tool(1, StepStatus.COMPLETED)]).settled
