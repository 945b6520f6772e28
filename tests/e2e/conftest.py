from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack, start_stack


@pytest.fixture(scope="session")
def stack(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[RunningStack]:
    """One shared stack for the tests that do not inject faults into its processes."""
    running = start_stack(emulator_session, tmp_path_factory.mktemp("stack"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def fresh_stack(emulator_session: EmulatorSession, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Start a stack of one's own (fault points, other settings): ``fresh_stack(**options)``."""
    started: list[RunningStack] = []

    def make(**options) -> RunningStack:  # type: ignore[no-untyped-def]
        running = start_stack(emulator_session, tmp_path / f"stack{len(started)}", **options)
        started.append(running)
        return running

    yield make
    for running in started:
        running.stop()
