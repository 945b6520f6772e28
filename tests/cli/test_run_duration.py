"""One duration for a run, from its record: the chat's and ``ask``'s last line, ``runs follow``
and ``runs show`` give the same figure, however long the command itself waited."""

from __future__ import annotations

import pytest

from ackloop.cli.follow import Followed, outcome_line
from ackloop.domain.records import RunLimits, RunRecord, RunStatus, StopReason


def _run(created: float, finished: float | None) -> RunRecord:
    return RunRecord(
        run_id="run-took", request_id="req", request_hash="h", conversation_id="c",
        agent="default", text="q", model="gemini-x", created_at=created,
        started_at=created + 1.0, finished_at=finished,
        status=RunStatus.COMPLETED if finished is not None else RunStatus.RUNNING,
        stop_reason=StopReason.ANSWERED if finished is not None else None, answer="a",
        limits=RunLimits(max_steps=3, max_seconds=60, max_tool_calls=5))


@pytest.mark.parametrize(("created", "finished", "now", "seconds"), [
    (1000.0, 1023.6, 5000.0, 23.6),  # ended: its end, whatever the time now
    (1000.0, None, 1004.25, 4.25),  # running: until now
    (1000.0, 1000.0, 1000.0, 0.0),
    (1000.0, None, 999.0, 0.0),  # a clock behind the writer's: never negative
])
def test_a_runs_duration_runs_from_its_creation_to_its_end(
        created: float, finished: float | None, now: float, seconds: float) -> None:
    assert _run(created, finished).seconds(now) == pytest.approx(seconds)


def test_the_last_line_gives_the_runs_duration_not_how_long_the_command_followed_it() -> None:
    # The chat follows a run again after each approval: its last wait is short.
    followed = Followed("run-took", _run(1000.0, 1023.6), [], elapsed=0.05)
    line = outcome_line(followed, None)
    assert "23.60 s" in line and "0.05 s" not in line
