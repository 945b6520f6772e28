from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ackloop_dev.devstack.stack import PUSH_DELIVERY, SERVICES
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


@pytest.fixture(scope="session")
def stoppable_stack(emulator_session: EmulatorSession,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """One stack shared by the tests that stop every ackloop process of it while their runs
    wait (:meth:`RunningStack.stop_every_process`) and start them again; a test that fails
    meanwhile leaves them started again for the next (:func:`processes_back`)."""
    running = start_stack(emulator_session, tmp_path_factory.mktemp("stoppable"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def processes_back(stoppable_stack: RunningStack) -> Iterator[RunningStack]:
    """:func:`stoppable_stack`, every process of which is running again after the test."""
    yield stoppable_stack
    stack = stoppable_stack.stack
    for name in SERVICES:
        if stack.processes[name].probe() == "exited":
            stack.restart_service(name)
    if stack.processes[PUSH_DELIVERY].probe() == "exited":
        stack.start_push_delivery().wait_ready(60.0)


@pytest.fixture
def fresh_stack(emulator_session: EmulatorSession, tmp_path: Path
                ) -> Iterator[Callable[..., RunningStack]]:
    """Start a stack of one's own (fault points, other settings): ``fresh_stack(**options)``."""
    with stack_factory(emulator_session, tmp_path) as make:
        yield make
