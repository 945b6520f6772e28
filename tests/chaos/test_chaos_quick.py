"""``ackloop chaos --quick`` as a test: the CI gate, with hard assertions on every target.

Runs the quick configuration on the session's emulators (real processes, the fake Gemini
server, the push delivery with the production retry policy, kills, duplicates, model and tool
faults, poison, a follow-up during a long run, research-team trees of child runs killed between
starting a child and recording its wait, calls that sleep and a schedule's ticks while what
wakes them is killed, a 429 storm, the dead-letter path) on the shipped numbers, every
duration scaled by the default time factor. This test starts it and checks what its active
phases found; ``test_chaos_quick_targets.py``, the last test of the session, waits for its end
and asserts every target (``tests/chaos/quick_run.py`` says why it is two tests). Temporal's
side is left to the command itself (it needs the optional bench extra).
"""

from __future__ import annotations

import pytest

from tests.chaos.quick_run import ACTIVE_PHASES_S, ChaosRun

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


@pytest.mark.timeout(ACTIVE_PHASES_S + 60)
def test_quick_chaos_leaves_only_its_dead_letter_backoff_to_wait_for(
        quick_chaos: ChaosRun) -> None:
    quick_chaos.wait_idle()
    assert not quick_chaos.done.is_set()  # the dead-letter path is still going on
    assert quick_chaos.active["followup"]["ok"] is True
    assert quick_chaos.active["storm"]["ok"] is True
    children = quick_chaos.active["children"]
    assert children["ok"] is True, children
    assert children["kills"] == ["tool:after_child", "model:after_commit"]
    assert children["trees"] == children["answers_ok"] == children["handed_off"] > 0
    sleeps = quick_chaos.active["sleeps"]
    assert sleeps["ok"] is True, sleeps
    assert sleeps["runs"] == sleeps["woken_by_clock"] == sleeps["answers_ok"] > 0
    assert sleeps["killed"] == ["task-queue", "tool_step", "model_step"]
    assert sleeps["firings"] == sleeps["scheduled_runs_completed"] >= 2
    assert (sleeps["ticks_missed"], sleeps["runs_doubled"]) == (0, 0)
