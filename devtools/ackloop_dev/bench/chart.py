"""The benchmark's chart (PNG): the headline figures of every engine measured, side by side.

A panel per figure, a bar per column of the report's table (ackloop, each Temporal storage,
DBOS, Restate: those the result holds), "n/a" where an engine lacks the figure.

matplotlib comes with the optional ``bench`` extra and is imported here only.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ackloop_dev.bench.report import engine_columns

Figures = dict[str, Any]


def _label(column: str) -> str:
    """A column's name as a bar's label: the engine, then what sets it apart, wrapped."""
    engine, _, detail = column.partition(" (")
    if not detail:
        return engine
    return engine + "\n" + textwrap.fill("(" + detail, 10, break_long_words=False)


def _series(result: Figures) -> dict[str, Figures]:
    """The table's columns: every engine the result holds."""
    return {_label(name): figures for name, figures in engine_columns(result).items()}


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


TITLE = "ackloop vs Temporal, DBOS and Restate"

COLOURS = {"ackloop": ("#1b7f5a", "#7fc8a9"), "Temporal": ("#3b5b92", "#9bb0d6"),
           "DBOS": ("#c0792b", "#e8b98a"), "Restate": ("#8e4fa3", "#c9a6d6")}
"""A colour per engine, and a lighter one for its other columns (another storage, the
emulator's push)."""


def _colours(names: list[str]) -> list[str]:
    seen: set[str] = set()
    colours = []
    for name in names:
        engine = name.split("\n")[0]
        dark, light = COLOURS.get(engine, ("#666666", "#aaaaaa"))
        colours.append(light if engine in seen else dark)
        seen.add(engine)
    return colours


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
    colours = _colours(names)
    rows = 2
    cols = -(-len(PANELS) // rows)
    fig, grid = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.4 * rows))
    axes = list(grid.flat)
    for spare in axes[len(PANELS):]:
        spare.axis("off")
    for ax, (title, read) in zip(axes, PANELS, strict=False):
        values = [_value(series[n], read) for n in names]
        bars = ax.bar(range(len(names)), [v or 0.0 for v in values], color=colours)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(names)), names, fontsize=7)
        for bar, value in zip(bars, values, strict=True):
            label = "n/a" if value is None else f"{value:.1f}"
            ax.annotate(label, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
    meta = result.get("meta", {})
    fig.suptitle(f"{TITLE}, reference workload - {meta.get('date', '')}, "
                 f"{meta.get('machine', '')}", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
