"""``ackloop chaos --quick`` as a test: the CI gate, with hard assertions.

Runs the quick configuration on the session's emulators (real processes, the fake Gemini
server, kills, duplicates, model and tool faults, poison, the dead-letter path). Temporal's
side is left to the command itself (it needs the optional bench extra).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ackloop.chaos.config import ChaosConfig
from ackloop.chaos.report import format_report
from ackloop.chaos.runner import run_chaos
from tests.support.emulators import EmulatorSession

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


async def test_quick_chaos_loses_nothing(emulator_session: EmulatorSession,
                                         tmp_path: Path) -> None:
    config = replace(ChaosConfig.quick(), temporal=False)
    figures = await run_chaos(config, tmp_path, quick=True, log=lambda _: None)
    print(format_report(figures))
    out, checks = figures["outcome"], figures["checks"]
    assert out["stuck"] == 0
    assert out["lost"] == 0
    assert checks["duplicate_recorded_steps"] == 0 and checks["history_gaps"] == 0
    assert checks["duplicate_executions"]["outside_kills"] == 0
    assert checks["answers_equal_fault_free"] == checks["answers_compared"]
    assert figures["dead_letter"].get("ok") is True
