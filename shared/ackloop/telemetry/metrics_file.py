"""Metrics on local disk: each process appends its points as JSON lines, ``ackloop metrics``
sums them.

The exporter asks the SDK for *delta* points: each line holds what happened since the process's
previous export, so the totals are the plain sum of every line of every process's file, with
no need to know which process restarted. A histogram line keeps its bucket counts, which sum the
same way; percentiles are read from the summed buckets.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import Counter, Histogram, UpDownCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
)


class JsonLinesExporter(MetricExporter):
    """Appends every delta point to ``path`` (one JSON object a line)."""

    def __init__(self, path: Path) -> None:
        delta = AggregationTemporality.DELTA
        super().__init__(preferred_temporality={Counter: delta, Histogram: delta,
                                                UpDownCounter: delta})
        self.path = path

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        lines = [json.dumps(point) for point in _points(metrics_data)]
        if lines:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


def _points(data: MetricsData) -> Iterable[dict[str, Any]]:
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    line: dict[str, Any] = {"name": metric.name, "unit": metric.unit,
                                            "attributes": dict(point.attributes or {}),
                                            "time": point.time_unix_nano}
                    if isinstance(point, NumberDataPoint):
                        line["value"] = point.value
                    elif isinstance(point, HistogramDataPoint):
                        line |= {"count": point.count, "sum": point.sum, "min": point.min,
                                 "max": point.max, "bounds": list(point.explicit_bounds),
                                 "buckets": list(point.bucket_counts)}
                    else:
                        continue
                    yield line


def _key(attributes: dict[str, Any]) -> str:
    return ",".join(f"{k}={attributes[k]}" for k in sorted(attributes))


@dataclass
class Series:
    """One metric with one set of attributes, summed over every line."""

    name: str
    attributes: dict[str, Any]
    unit: str = ""
    value: float = 0.0
    count: int = 0
    sum: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    bounds: list[float] = field(default_factory=list)
    buckets: list[int] = field(default_factory=list)

    @property
    def is_histogram(self) -> bool:
        return bool(self.buckets)

    def add(self, line: dict[str, Any]) -> None:
        if "value" in line:
            self.value += line["value"]
            return
        self.count += line["count"]
        self.sum += line["sum"]
        self.min = min(self.min, line["min"])
        self.max = max(self.max, line["max"])
        if not self.buckets:
            self.bounds, self.buckets = list(line["bounds"]), [0] * len(line["buckets"])
        self.buckets = [a + b for a, b in zip(self.buckets, line["buckets"], strict=True)]

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile (0-100), interpolated inside its bucket, within min and max."""
        if not self.count:
            return 0.0
        rank = q / 100 * self.count
        seen = 0
        for i, in_bucket in enumerate(self.buckets):
            if in_bucket and seen + in_bucket >= rank:
                low = self.bounds[i - 1] if i > 0 else self.min
                high = self.bounds[i] if i < len(self.bounds) else self.max
                low, high = max(low, self.min), min(high, self.max)
                return low + (high - low) * (rank - seen) / in_bucket
            seen += in_bucket
        return self.max

    def as_dict(self) -> dict[str, Any]:
        base: dict[str, Any] = {"name": self.name, "attributes": self.attributes,
                                "unit": self.unit}
        if not self.is_histogram:
            return base | {"value": self.value}
        return base | {"count": self.count, "sum": self.sum, "min": self.min, "max": self.max,
                       "p50": self.percentile(50), "p90": self.percentile(90),
                       "p99": self.percentile(99)}


def read_series(directory: Path) -> list[Series]:
    """Every series of every ``*.jsonl`` file in ``directory``, summed (a torn last line, from
    a process killed while writing, is skipped)."""
    series: dict[tuple[str, str], Series] = {}
    for path in sorted(directory.glob("*.jsonl")):
        for text in path.read_text(encoding="utf-8").splitlines():
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                continue
            key = (line["name"], _key(line["attributes"]))
            found = series.setdefault(key, Series(line["name"], line["attributes"],
                                                  line.get("unit", "")))
            found.add(line)
    return [series[key] for key in sorted(series)]

