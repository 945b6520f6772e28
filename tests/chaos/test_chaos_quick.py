"""``ackloop chaos --quick`` as a test: the CI gate, with hard assertions on every target.

Runs the quick configuration on the session's emulators (real processes, the fake Gemini
server, the push delivery with the production retry policy, kills, duplicates, model and tool
faults, poison, a follow-up during a long run, research-team trees of child runs killed between
starting a child and recording its wait, calls that sleep and a schedule's ticks while what
wakes them is killed, a 429 storm, the dead-letter path) on the shipped numbers, every
duration scaled by the default time factor. Its wall time is the dead-letter
path's: ten deliveries of the shipped policy take 2430 s of backoff, 405 s at the factor 1/6
(the smallest the engine's request-timeout floor allows); everything else runs beside it, and
is over after about three minutes.

So the run is split in two tests that the session orders apart (``tests/conftest.py``): the
first starts it, waits for its active phases (nothing else of the suite runs meanwhile, so they
have the machine to themselves) and checks the follow-up and the storm; the rest of the suite
then runs while the chaos stack only waits out the dead-letter backoff; the last test of the
session waits for the end of the run and asserts every target. Nothing of the run is shortened:
the same phases, on the same numbers. Temporal's side is left to the command itself (it needs
the optional bench extra).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from ackloop.bus.delivery import load_policy
from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.report import format_report
from ackloop_dev.chaos.runner import run_chaos
from ackloop_dev.chaos.timing import DEFAULT_FACTOR, shipped_default
from tests.support.emulators import EmulatorSession

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

STARTS = "test_quick_chaos_leaves_only_its_dead_letter_backoff_to_wait_for"
ENDS = "test_quick_chaos_on_the_shipped_numbers_meets_every_target"
"""The two tests of the run, by name: ``tests/conftest.py`` runs the first one first and the
second one last."""

ACTIVE_PHASES_S = 420.0
"""Bound on the wait for the active phases (about 180 s here)."""
WHOLE_RUN_S = 840.0
"""Bound on the wait for the whole run (about 470 s here; its own target is 540 s)."""


@dataclass
class ChaosRun:
    """The quick chaos run, going on in a thread of its own (its own event loop)."""

    idle: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    active: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None

    def start(self, directory: Path) -> threading.Thread:
        config = replace(ChaosConfig.quick(), temporal=False)

        def idle(outcomes: dict[str, Any]) -> None:
            self.active.update(outcomes)
            self.idle.set()

        def body() -> None:
            try:
                self.figures = asyncio.run(run_chaos(config, directory, quick=True,
                                                     log=lambda _: None, on_idle=idle))
            except BaseException as exc:  # re-raised by the tests that wait for it
                self.error = exc
            finally:
                self.idle.set()
                self.done.set()

        thread = threading.Thread(target=body, name="quick-chaos", daemon=True)
        thread.start()
        return thread

    def wait(self, event: threading.Event, seconds: float) -> None:
        assert event.wait(seconds), f"the quick chaos run did not get there in {seconds:.0f} s"
        if self.error is not None:
            raise self.error


@pytest.fixture(scope="session")
def quick_chaos(emulator_session: EmulatorSession,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosRun]:
    run = ChaosRun()
    thread = run.start(tmp_path_factory.mktemp("quick-chaos"))
    yield run
    thread.join(WHOLE_RUN_S)  # its stack stops before the session's emulators do


@pytest.mark.timeout(ACTIVE_PHASES_S + 60)
def test_quick_chaos_leaves_only_its_dead_letter_backoff_to_wait_for(
        quick_chaos: ChaosRun) -> None:
    quick_chaos.wait(quick_chaos.idle, ACTIVE_PHASES_S)
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


@pytest.mark.timeout(WHOLE_RUN_S + 60)
def test_quick_chaos_on_the_shipped_numbers_meets_every_target(quick_chaos: ChaosRun) -> None:
    quick_chaos.wait(quick_chaos.done, WHOLE_RUN_S)
    figures = quick_chaos.figures
    print(format_report(figures))

    # The shipped numbers, one factor on every duration.
    timing = figures["timing"]
    assert timing["factor"] == round(DEFAULT_FACTOR, 6)
    assert timing["max_delivery_attempts"] == load_policy().max_delivery_attempts
    assert timing["max_step_attempts"] == shipped_default("max_step_attempts")
    assert figures["lease_seconds"] == round(shipped_default("lease_seconds") * DEFAULT_FACTOR, 4)

    every, out = figures["all_runs"], figures["outcome"]
    assert every["lost"] == 0 and out["lost"] == 0
    assert every["stuck"] == 0 and out["stuck"] == 0
    assert out["ended_by_crash_or_duplicate"] == 0
    assert every["transcript_overwrites"] == 0 and every["conversation_order_problems"] == 0
    assert every["conversations_with_follow_ups"] > 0
    assert figures["recovery"]["ackloop"]["n"] > 0
    assert figures["followup"]["ok"] is True
    assert figures["storm"]["ok"] is True
    assert figures["children"]["ok"] is True
    assert figures["sleeps"]["ok"] is True
    assert figures["dead_letter"]["ok"] is True
    not_met = [t for t in figures["targets"] if not t["met"]]
    assert not not_met, not_met
