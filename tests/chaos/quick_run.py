"""The quick chaos run behind the CI gate's two tests, shared between the test processes.

``ackloop chaos --quick``'s wall time is its dead-letter path: ten deliveries of the shipped
retry policy take 2430 s of backoff, 405 s at the time factor 1/6 (the smallest the engine's
request-timeout floor allows); everything else is over in about three minutes. So the run is
two tests that the session orders apart (``tests/conftest.py``): the first starts it, in a
thread of the test process that runs it, and waits for its active phases; the last waits for
its end and asserts every target. Between them the rest of the suite runs while the run waits
out its backoff. Nothing of the run is shortened: the same phases, on the same numbers.

Under ``pytest -n`` the two tests may run in different processes, so the run writes its
figures to a directory every process of the session shares (:func:`shared_directory`); the
process that started it waits for its end before it exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from ackloop_dev.chaos.config import ChaosConfig
from ackloop_dev.chaos.runner import run_chaos

ACTIVE_PHASES_S = 420.0
"""Bound on the wait for the active phases (about 180 s here)."""
WHOLE_RUN_S = 840.0
"""Bound on the wait for the whole run (about 470 s here; its own target is 540 s)."""

STARTED, FIGURES, FAILED = "started", "figures.json", "failed.txt"
"""The files the run leaves in its shared directory: begun, its figures, or why it failed."""


def shared_directory(factory: pytest.TempPathFactory) -> Path:
    """A directory of this test session that every one of its processes sees: the session's
    base temporary directory (each ``pytest -n`` worker's own is a folder of it)."""
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    directory = shared / "quick-chaos-shared"
    directory.mkdir(exist_ok=True)
    return directory


@dataclass
class ChaosRun:
    """The quick chaos run, going on in a thread of its own (its own event loop)."""

    shared: Path
    idle: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    active: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None

    def start(self, directory: Path) -> threading.Thread:
        config = replace(ChaosConfig.quick(), temporal=False)
        (self.shared / STARTED).write_text(str(os.getpid()))

        def idle(outcomes: dict[str, Any]) -> None:
            self.active.update(outcomes)
            self.idle.set()

        def body() -> None:
            try:
                figures = asyncio.run(run_chaos(config, directory, quick=True,
                                                log=lambda _: None, on_idle=idle))
                written = self.shared / f"{FIGURES}.part"
                written.write_text(json.dumps(figures))
                written.replace(self.shared / FIGURES)  # whole, or not there yet
            except BaseException as exc:  # re-raised by the tests that wait for it
                self.error = exc
                (self.shared / FAILED).write_text(f"{type(exc).__name__}: {exc}")
            finally:
                self.idle.set()
                self.done.set()

        thread = threading.Thread(target=body, name="quick-chaos", daemon=True)
        thread.start()
        return thread

    def wait_idle(self) -> None:
        assert self.idle.wait(ACTIVE_PHASES_S), (
            f"the quick chaos run did not end its active phases in {ACTIVE_PHASES_S:.0f} s")
        if self.error is not None:
            raise self.error


def started_here_or_elsewhere(shared: Path) -> bool:
    """Whether a process of this session started the run."""
    return (shared / STARTED).exists()


def wait_for_figures(shared: Path, seconds: float = WHOLE_RUN_S) -> dict[str, Any]:
    """The figures of the run a process of this session started, once it has ended."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (shared / FAILED).exists():
            raise AssertionError(f"the quick chaos run failed: {(shared / FAILED).read_text()}")
        if (shared / FIGURES).exists():
            figures: dict[str, Any] = json.loads((shared / FIGURES).read_text())
            return figures
        time.sleep(1.0)
    raise AssertionError(f"the quick chaos run did not end in {seconds:.0f} s")
