"""The chaos suite's own logic: run references, in-flight detection, answer comparison."""

from __future__ import annotations

from collections import Counter

from ackloop.chaos.checks import normalize_answer
from ackloop.chaos.kills import interrupted, kill_plan, owner_pid
from ackloop.chaos.model_server import describe
from ackloop.chaos.workload import TEMPLATES, question, reference_of
from ackloop.model.us_states import find_state_code
from ackloop.records import StepRecord, StepStatus


def test_the_reference_is_found_and_changes_no_state() -> None:
    for template in TEMPLATES:
        text = question(template, "r0042")
        assert reference_of(text) == "r0042"
        assert find_state_code(text) == find_state_code(template.text)


def test_ledger_entry_names_run_turn_and_secret() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "Where am I? (ref r0001)"}]},
                         {"role": "model", "parts": [{"text": "x"}]},
                         {"role": "user", "parts": [{"text": "AIzaSECRET"}]}]}
    assert describe(body, "AIzaSECRET") == {"ref": "r0001", "turn": 1, "contents": 3,
                                            "secret": True}


def test_hour_rounded_times_are_masked() -> None:
    a = "Flood Watch issued Nov 30 at 2:00AM UTC until Nov 30 at 8:00AM UTC"
    b = "Flood Watch issued Nov 30 at 3:00AM UTC until Nov 30 at 9:00AM UTC"
    assert normalize_answer(a) == normalize_answer(b) != a


def step(key: str, owner: str, status: StepStatus, lease: float, completed: float | None = None
         ) -> StepRecord:
    kind = "model" if "model" in key else "tool"
    return StepRecord(key=key, kind=kind, name=kind, turn=int(key[:4]), owner=owner,
                      status=status, lease_expires_at=lease, completed_at=completed)


def test_in_flight_steps_are_those_the_killed_process_held() -> None:
    assert owner_pid("vm:4242:abc123") == 4242
    steps = [step("0000-model", "vm:1:a", StepStatus.COMPLETED, 0.0, 50.0),
             step("0000-tool-000", "vm:7:a", StepStatus.RUNNING, 103.0)]
    assert interrupted(steps, {7}, 100.0, after_commit=False) == ["0000-tool-000"]
    released = [step("0000-tool-000", "vm:7:a", StepStatus.RUNNING, 0.0)]
    assert interrupted(released, {7}, 100.0, after_commit=False) == []
    committed = [step("0000-model", "vm:7:a", StepStatus.COMPLETED, 0.0, 99.9)]
    assert interrupted(committed, {7}, 100.0, after_commit=True) == ["0000-model"]
    assert interrupted(committed, {8}, 100.0, after_commit=True) == []


def test_kill_plan_interleaves_points() -> None:
    assert kill_plan(("a", "b"), 2) == ["a", "b", "a", "b"]
    assert Counter(kill_plan(("a", "b", "c"), 3)) == {"a": 3, "b": 3, "c": 3}
