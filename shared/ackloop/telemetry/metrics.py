"""What the engine counts, through the OpenTelemetry metrics API, and where it is exported.

The engine calls the recording functions below at the points where each event happens once
(a run created, a run's end committed, a step delivery answered, a claim). They do nothing until
:func:`configure` has switched metrics on, and only then is the OpenTelemetry SDK imported, so a
process with metrics off (tests, the CLI, a cold start without an exporter) pays nothing.

``ACKLOOP_METRICS_EXPORT`` picks the exporter: ``auto`` (the default) is ``file`` when
``ACKLOOP_METRICS_DIR`` is set (the local stack sets it), else ``cloud_monitoring`` on Cloud Run
(``K_SERVICE`` set), else ``none``. Both export on a periodic reader, and the SDK's exit hook
flushes what is left when the process stops (Cloud Run sends SIGTERM first). Cloud Run throttles
a service's CPU between requests (``cpu_idle``), so a point may reach Cloud Monitoring only at
the next request or at shutdown; flushing inside every request instead would add a Cloud
Monitoring call to each answer and break its limit of one point per series every 5 s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.sdk.metrics import MeterProvider

Export = Literal["cloud_monitoring", "file", "none"]
EXPORTS = ("auto", "cloud_monitoring", "file", "none")
METER = "ackloop"
CLOUD_MONITORING_INTERVAL_S = 60.0
"""Cloud Monitoring keeps one point per series per 5 s at most; its exporter's usual period."""
FILE_INTERVAL_S = 1.0
"""Locally, points reach the file within a second (``ackloop metrics`` reads them)."""
DURATION_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
                      60.0, 120.0, 300.0)

RUNS_STARTED = "ackloop.runs.started"
RUNS_FINISHED = "ackloop.runs.finished"
STEP_DURATION = "ackloop.step.duration"
STEP_RETRIES = "ackloop.step.retries"
STEP_TAKEOVERS = "ackloop.step.takeovers"
PUSH_ANSWERS = "ackloop.hosting.push.answers"
MODEL_TOKENS = "ackloop.model.tokens"
COST_USD = "ackloop.domain.cost.usd"
QUOTA_PLACES = "ackloop.quota.places"
QUOTA_WAIT = "ackloop.quota.wait"
MODEL_REFUSED = "ackloop.model.refused"


class MetricsConfigError(ValueError):
    """The environment asks for an exporter that does not exist."""


@dataclass(frozen=True)
class _Instruments:
    runs_started: Counter
    runs_finished: Counter
    step_duration: Histogram
    step_retries: Counter
    step_takeovers: Counter
    push_answers: Counter
    model_tokens: Counter
    cost_usd: Counter
    quota_places: Counter
    quota_wait: Histogram
    model_refused: Counter


_instruments: _Instruments | None = None
_provider: MeterProvider | None = None


def chosen_export(environ: Mapping[str, str]) -> Export:
    """The exporter ``environ`` asks for (see the module docstring)."""
    asked = environ.get("ACKLOOP_METRICS_EXPORT", "auto").strip().lower() or "auto"
    if asked not in EXPORTS:
        raise MetricsConfigError(f"ACKLOOP_METRICS_EXPORT={asked!r}: use one of {EXPORTS}")
    if asked != "auto":
        if asked == "file" and not environ.get("ACKLOOP_METRICS_DIR"):
            raise MetricsConfigError("ACKLOOP_METRICS_EXPORT=file needs ACKLOOP_METRICS_DIR")
        return asked  # type: ignore[return-value]
    if environ.get("ACKLOOP_METRICS_DIR"):
        return "file"
    return "cloud_monitoring" if environ.get("K_SERVICE") else "none"


def configure(project_id: str, service: str,
              environ: Mapping[str, str] = os.environ) -> Export:
    """Switch metrics on for this process as ``environ`` asks (once; later calls change
    nothing). ``service`` names the process in its points (the function, or ``api``)."""
    global _instruments, _provider
    export = chosen_export(environ)
    if export == "none" or _provider is not None:
        return export
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    exporter: MetricExporter
    resource = Resource.create({"service.name": service})
    if export == "file":
        from ackloop.telemetry.metrics_file import JsonLinesExporter

        directory = Path(environ["ACKLOOP_METRICS_DIR"])
        exporter = JsonLinesExporter(directory / f"{service}-{os.getpid()}.jsonl")
        interval = FILE_INTERVAL_S
    else:
        from opentelemetry.exporter.cloud_monitoring import CloudMonitoringMetricsExporter
        from opentelemetry.resourcedetector.gcp_resource_detector import (
            GoogleCloudResourceDetector,
        )

        # Instances of one service write the same series: a unique label keeps them apart.
        exporter = CloudMonitoringMetricsExporter(project_id=project_id,
                                                  add_unique_identifier=True)
        resource = resource.merge(GoogleCloudResourceDetector(raise_on_error=False).detect())
        interval = CLOUD_MONITORING_INTERVAL_S
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=interval * 1000)
    _provider = MeterProvider(metric_readers=[reader], resource=resource)
    _instruments = _create(_provider)
    return export


def _create(provider: MeterProvider) -> _Instruments:
    meter = provider.get_meter(METER)
    return _Instruments(
        runs_started=meter.create_counter(RUNS_STARTED, "{run}", "Runs created, by agent."),
        runs_finished=meter.create_counter(
            RUNS_FINISHED, "{run}", "Runs ended, by agent, status and stop reason."),
        step_duration=meter.create_histogram(
            STEP_DURATION, "s", "Time to answer one step delivery, by kind and outcome.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S),
        step_retries=meter.create_counter(
            STEP_RETRIES, "{claim}", "Claims of a step beyond its first, by kind."),
        step_takeovers=meter.create_counter(
            STEP_TAKEOVERS, "{claim}", "Steps taken over from an expired lease, by kind."),
        push_answers=meter.create_counter(
            PUSH_ANSWERS, "{answer}", "Push deliveries answered, by function and status."),
        model_tokens=meter.create_counter(
            MODEL_TOKENS, "{token}", "Gemini tokens, by model and type (prompt, output)."),
        cost_usd=meter.create_counter(COST_USD, "USD", "What steps cost, by kind."),
        quota_places=meter.create_counter(
            QUOTA_PLACES, "{call}", "Places taken under a model quota, by quota and whether "
            "the call waited for its place."),
        quota_wait=meter.create_histogram(
            QUOTA_WAIT, "s", "Time a model step waited for its place under a quota, by quota.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS_S),
        model_refused=meter.create_counter(
            MODEL_REFUSED, "{answer}", "429s the model answered, by model and whether a "
            "quota was declared for it."),
    )


def flush() -> None:
    """Export what is recorded now (tests; the exit hook does it when the process stops)."""
    if _provider is not None:
        _provider.force_flush()


def run_started(agent: str) -> None:
    if _instruments is not None:
        _instruments.runs_started.add(1, {"agent": agent})


def run_finished(agent: str, status: str, stop_reason: str) -> None:
    if _instruments is not None:
        _instruments.runs_finished.add(
            1, {"agent": agent, "status": status, "stop_reason": stop_reason})


def step_answered(kind: str, outcome: str, seconds: float) -> None:
    """One delivery of a step (``kind`` model or tool) answered with ``outcome``."""
    if _instruments is not None:
        _instruments.step_duration.record(seconds, {"kind": kind, "outcome": outcome})


def step_claimed(kind: str, attempt: int, taken_over: bool) -> None:
    """A step claimed for its ``attempt``-th time (1 is its first claim)."""
    if _instruments is None:
        return
    if attempt > 1:
        _instruments.step_retries.add(1, {"kind": kind})
    if taken_over:
        _instruments.step_takeovers.add(1, {"kind": kind})


def push_answered(function: str, status: int) -> None:
    if _instruments is not None:
        _instruments.push_answers.add(
            1, {"function": function, "status": str(status), "class": f"{status // 100}xx"})


def model_tokens(model: str, prompt: int, output: int) -> None:
    if _instruments is None:
        return
    for kind, count in (("prompt", prompt), ("output", output)):
        if count:
            _instruments.model_tokens.add(count, {"model": model, "type": kind})


def step_cost(kind: str, usd: float) -> None:
    """What a committed step cost (from its cost record)."""
    if _instruments is not None and usd:
        _instruments.cost_usd.add(usd, {"kind": kind})


def quota_place(quota: str, waited: bool) -> None:
    """A call took its place under ``quota``: at once, or after waiting for it."""
    if _instruments is not None:
        _instruments.quota_places.add(1, {"quota": quota, "waited": str(waited).lower()})


def quota_waited(quota: str, seconds: float) -> None:
    """A model step that waited for its place under ``quota`` runs, ``seconds`` after it
    began to wait."""
    if _instruments is not None:
        _instruments.quota_wait.record(seconds, {"quota": quota})


def model_refused(model: str, limited: bool) -> None:
    """The model answered 429 (``limited``: a quota is declared for the model)."""
    if _instruments is not None:
        _instruments.model_refused.add(1, {"model": model, "limited": str(limited).lower()})
