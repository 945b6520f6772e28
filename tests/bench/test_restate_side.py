"""The Restate peer: a run's timings become step gaps, its phases a column of the report, and it
says why it is skipped where it cannot run."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ackloop_dev.bench import restate_side
from ackloop_dev.bench.report import main_table
from ackloop_dev.bench.restate_side import _Run, step_gaps, summarise


def test_step_gaps_run_from_each_steps_end_to_the_next_ones_start() -> None:
    assert step_gaps([[1.0, 1.5], [1.502, 1.6], [1.7, 1.8]]) == pytest.approx([0.002, 0.1])
    assert step_gaps([]) == []


def test_a_phase_is_summarised_and_shown_in_its_own_column() -> None:
    runs = [_Run(True, 0.02, [0.002, 0.004]), _Run(False, 1.0, [], error="timeout")]
    phase = summarise(runs, 0.25, {"server": 0.01, "service": 0.004, "client": 0.002,
                                   "total": 0.016, "other": 0.0})
    assert (phase["completed"], phase["failed"], phase["runs_per_s"]) == (1, 1, 4.0)
    assert phase["cpu_ms_per_run"]["total"] == 16.0
    assert phase["errors"] == ["timeout"]
    table = main_table({"restate": {"sequential": phase, "concurrent": [],
                                    "peak_rss_mb": {"server": 60.0, "service": 30.0},
                                    "cold_start_s": 1.4}})
    assert "| figure | Restate (single node) |" in table
    assert "| peak RSS MiB per process | server 60 / service 30 |" in table


def test_unavailable_without_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(restate_side, "server_binary", lambda: None)
    reason = restate_side.unavailable()
    assert reason is not None and ("restate-server" in reason or "not installed" in reason)


@pytest.mark.skipif(restate_side.unavailable() is not None,
                    reason=str(restate_side.unavailable()))
def test_a_tiny_restate_run_end_to_end(tmp_path: Path) -> None:
    config = restate_side.RestateBenchConfig(warmup_runs=1, sequential_runs=3,
                                             concurrency=((2, 4),), run_timeout_s=60.0)
    side = asyncio.run(restate_side.measure_restate(config, tmp_path))
    seq = side["sequential"]
    assert (seq["completed"], seq["failed"]) == (3, 0)
    assert seq["step_overhead_ms"]["n"] == 3 * 4
    assert seq["cpu_s"]["server"] > 0
    assert side["concurrent"][0]["completed"] == 4
    assert side["peak_rss_mb"]["server"] > side["peak_rss_mb"]["service"] > 0
