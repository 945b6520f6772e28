from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack, stack_factory, start_stack


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
def fresh_stack(emulator_session: EmulatorSession, tmp_path: Path
                ) -> Iterator[Callable[..., RunningStack]]:
    """Start a stack of one's own (fault points, other settings): ``fresh_stack(**options)``."""
    with stack_factory(emulator_session, tmp_path) as make:
        yield make
