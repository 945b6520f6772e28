from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.chaos.quick_run import WHOLE_RUN_S, ChaosRun, shared_directory
from tests.support.emulators import EmulatorSession


@pytest.fixture(scope="session")
def quick_chaos(emulator_session: EmulatorSession,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosRun]:
    """The quick chaos run, started in this process (``tests/chaos/quick_run.py``)."""
    run = ChaosRun(shared_directory(tmp_path_factory))
    thread = run.start(tmp_path_factory.mktemp("quick-chaos"))
    yield run
    thread.join(WHOLE_RUN_S)  # its stack stops before the session's emulators do
