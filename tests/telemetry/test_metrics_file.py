"""The metrics' local exporter and reader, and which exporter a process chooses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

from ackloop.telemetry.metrics import MetricsConfigError, chosen_export
from ackloop.telemetry.metrics_file import JsonLinesExporter, read_series

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("environ", "export"), [
    ({}, "none"),
    ({"K_SERVICE": "model-step"}, "cloud_monitoring"),
    ({"ACKLOOP_METRICS_DIR": "/tmp/m"}, "file"),
    ({"K_SERVICE": "model-step", "ACKLOOP_METRICS_EXPORT": "none"}, "none"),
    ({"ACKLOOP_METRICS_EXPORT": "cloud_monitoring"}, "cloud_monitoring"),
])
def test_the_exporter_follows_the_environment(environ: dict[str, str], export: str) -> None:
    assert chosen_export(environ) == export


@pytest.mark.parametrize(("environ", "says"), [
    ({"ACKLOOP_METRICS_EXPORT": "prometheus"}, "use one of"),
    ({"ACKLOOP_METRICS_EXPORT": "file"}, "needs ACKLOOP_METRICS_DIR"),
])
def test_an_unknown_exporter_is_refused_with_what_to_set(environ: dict[str, str],
                                                         says: str) -> None:
    with pytest.raises(MetricsConfigError, match=says):
        chosen_export(environ)


def _write(path: Path, runs: int, durations: list[float]) -> None:
    """One process's points, exported in two rounds (deltas) like a periodic reader would."""
    reader = PeriodicExportingMetricReader(JsonLinesExporter(path), export_interval_millis=1e9)
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("test")
    started = meter.create_counter("ackloop.runs.started")
    duration = meter.create_histogram("ackloop.step.duration", "s",
                                      explicit_bucket_boundaries_advisory=[0.1, 1.0, 10.0])
    half = len(durations) // 2
    for batch in (durations[:half], durations[half:]):
        for seconds in batch:
            duration.record(seconds, {"kind": "model"})
        started.add(runs, {"agent": "support"})
        provider.force_flush()
    provider.shutdown()


def test_points_of_several_processes_and_exports_sum_to_the_totals(tmp_path: Path) -> None:
    _write(tmp_path / "ingest-1.jsonl", 2, [0.05, 0.5, 0.5, 5.0])
    _write(tmp_path / "ingest-2.jsonl", 1, [0.5, 0.5])
    # a process killed mid-write leaves a torn line: skipped
    with (tmp_path / "ingest-2.jsonl").open("a") as out:
        out.write('{"name": "ackloop.runs.st')
    series = {s.name: s for s in read_series(tmp_path)}
    assert series["ackloop.runs.started"].value == 2 * 2 + 1 * 2
    latency = series["ackloop.step.duration"]
    assert latency.count == 6 and latency.sum == pytest.approx(7.05)
    assert latency.min == 0.05 and latency.max == 5.0
    assert 0.1 <= latency.percentile(50) <= 1.0
    assert 1.0 <= latency.percentile(99) <= 5.0


def test_ackloop_metrics_prints_totals_and_percentiles(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics"
    _write(metrics / "model_step-7.jsonl", 1, [0.5, 0.5])
    env = {k: v for k, v in os.environ.items() if k != "ACKLOOP_METRICS_DIR"}

    def ackloop(*args: str) -> str:
        done = subprocess.run([sys.executable, "-c", "from ackloop.cli.main import app; app()",
                               "metrics", "--directory", str(tmp_path), *args], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = ackloop()
    assert "ackloop.runs.started  agent=support  2" in text
    assert "ackloop.step.duration  kind=model" in text and "P50" in text
    parsed = json.loads(ackloop("--json"))
    assert {s["name"] for s in parsed["series"]} == {"ackloop.runs.started",
                                                     "ackloop.step.duration"}
    assert "no metrics in" in ackloop("--directory", str(tmp_path / "empty"))
