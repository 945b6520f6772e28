"""The DBOS peer: its worker's output becomes a column of the report, and it says why it is
skipped where it cannot run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ackloop_dev.bench import dbos_side
from ackloop_dev.bench.report import main_table, render


def _phase(concurrency: int) -> dict[str, Any]:
    return {"runs": 3, "concurrency": concurrency, "wall_s": 0.5,
            "results": [{"ok": True, "seconds": 0.02, "gaps": [0.004, 0.006]},
                        {"ok": True, "seconds": 0.03, "gaps": [0.005]},
                        {"ok": False, "seconds": 1.0, "gaps": [], "error": "boom"}],
            "cpu_s": {"worker": 0.03, "postgres": 0.01, "total": 0.04, "other": 0.1}}


def test_the_workers_phases_are_summarised_like_a_temporal_storage() -> None:
    side = dbos_side.summarise_worker(
        {"cold_start_s": 1.2345, "sequential": _phase(1), "concurrent": [_phase(50)],
         "peak_rss_mb": 70.0}, 35.0)
    seq = side["sequential"]
    assert (seq["runs"], seq["completed"], seq["failed"]) == (3, 2, 1)
    assert seq["runs_per_s"] == 4.0
    assert seq["step_overhead_ms"]["n"] == 3 and seq["step_overhead_ms"]["p50"] == 5.0
    assert seq["cpu_ms_per_run"] == {"worker": 15.0, "postgres": 5.0, "total": 20.0,
                                     "other": 50.0}
    assert seq["errors"] == ["boom"]
    assert side["concurrent"][0]["concurrency"] == 50
    assert side["cold_start_s"] == 1.234
    assert side["peak_rss_mb"] == {"worker": 70.0, "postgres": 35.0}


def test_the_report_gives_dbos_a_column_and_names_a_skipped_peer() -> None:
    side = dbos_side.summarise_worker(
        {"cold_start_s": 1.0, "sequential": _phase(1), "concurrent": [_phase(50)],
         "peak_rss_mb": 70.0}, 35.0)
    table = main_table({"dbos": {**side, "postgres": "15"}})
    assert "| figure | DBOS (PostgreSQL 15) |" in table
    assert "| runs/s at 50 concurrent | 4.00 |" in table
    text = render({"meta": {"skipped": {"dbos": "the dbos package is not installed"}}})
    assert "dbos: not measured (the dbos package is not installed)" in text


def test_unavailable_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dbos_side, "pg_bin", lambda: None)
    reason = dbos_side.unavailable()
    assert reason is not None and ("PostgreSQL" in reason or "dbos" in reason)


@pytest.mark.skipif(dbos_side.unavailable() is not None,
                    reason=str(dbos_side.unavailable()))
def test_a_tiny_dbos_run_end_to_end(tmp_path: Path) -> None:
    config = dbos_side.DbosBenchConfig(warmup_runs=1, sequential_runs=3,
                                       concurrency=((2, 4),), timeout_s=120.0)
    side = dbos_side.measure_dbos_sync(config, tmp_path)
    seq = side["sequential"]
    assert (seq["completed"], seq["failed"]) == (3, 0)
    assert seq["step_overhead_ms"]["n"] == 3 * 4  # five steps, four gaps a run
    assert side["concurrent"][0]["completed"] == 4
    # every step of every run (first, warm-up, 3 sequential, 4 concurrent) was checkpointed by
    # the server; its CPU over three tiny runs can round to zero clock ticks
    assert side["checkpointed_steps"] >= (1 + 1 + 3 + 4) * 5
    assert side["cold_start_s"] > 0
    assert "database system is shut down" in (tmp_path / "postgres.log").read_text()
