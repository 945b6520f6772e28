"""The benchmark's chart (PNG): the headline figures of each engine, side by side.

matplotlib comes with the optional ``bench`` extra and is imported here only.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Figures = dict[str, Any]


def _series(result: Figures) -> dict[str, Figures]:
    series: dict[str, Figures] = {}
    ack = result.get("ackloop")
    if ack:
        series["ackloop\n(push delivery)"] = ack
        if ack.get("emulator_push"):
            series["ackloop\n(emulator push)"] = ack["emulator_push"]
    for storage, figures in ((result.get("temporal") or {}).get("storages") or {}).items():
        series[f"Temporal\n({storage})"] = figures
    return series


def _value(figures: Figures, read: Callable[[Figures], float]) -> float | None:
    try:
        return float(read(figures))
    except (KeyError, TypeError, StopIteration):
        return None


def _throughput(concurrency: int) -> Callable[[Figures], float]:
    def read(figures: Figures) -> float:
        phase = next(p for p in figures["concurrent"] if p["concurrency"] == concurrency)
        return float(phase["runs_per_s"])

    return read


def _cpu_at(concurrency: int) -> Callable[[Figures], float]:
    def read(figures: Figures) -> float:
        phase = next(p for p in figures["concurrent"] if p["concurrency"] == concurrency)
        return float(phase["cpu_ms_per_run"]["total"])

    return read


PANELS: list[tuple[str, Callable[[Figures], float]]] = [
    ("per-step overhead p50 (ms, lower is better)",
     lambda f: f["sequential"]["step_overhead_ms"]["p50"]),
    ("run end-to-end p50, sequential (ms)", lambda f: f["sequential"]["e2e_ms"]["p50"]),
    ("runs/s at 50 concurrent (higher is better)", _throughput(50)),
    ("runs/s at 200 concurrent (higher is better)", _throughput(200)),
    ("CPU ms per run at 50 concurrent, all processes", _cpu_at(50)),
]


def draw(result: Figures, path: Path) -> Path:
    """Draw the chart to ``path`` and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = _series(result)
    names = list(series)
    colours = ["#1b7f5a", "#7fc8a9", "#3b5b92", "#9bb0d6"][: len(names)]
    fig, axes = plt.subplots(1, len(PANELS), figsize=(4 * len(PANELS), 4.2))
    for ax, (title, read) in zip(axes, PANELS, strict=True):
        values = [_value(series[n], read) for n in names]
        bars = ax.bar(range(len(names)), [v or 0.0 for v in values], color=colours)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(names)), names, fontsize=7)
        for bar, value in zip(bars, values, strict=True):
            label = "n/a" if value is None else f"{value:.1f}"
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    meta = result.get("meta", {})
    fig.suptitle(f"ackloop vs Temporal, reference workload - {meta.get('date', '')}, "
                 f"{meta.get('machine', '')}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
