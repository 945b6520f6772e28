"""The benchmark's chart: a panel per figure, a bar per engine the result holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ackloop_dev.bench import chart


def _figures(overhead: float, runs_per_s: float) -> dict[str, Any]:
    phase = {"runs_per_s": runs_per_s, "cpu_ms_per_run": {"total": 20.0}}
    sequential = {"step_overhead_ms": {"p50": overhead}, "e2e_ms": {"p50": 5 * overhead}}
    return {"sequential": sequential,
            "concurrent": [{"concurrency": 50, **phase}, {"concurrency": 200, **phase}]}


def _result() -> dict[str, Any]:
    emulator_push = {"sequential": _figures(66.0, 30.0)["sequential"], "concurrent": []}
    ack = _figures(26.0, 35.0) | {"emulator_push": emulator_push}
    return {"meta": {"date": "2026-12-04 12:00 UTC", "machine": "2 cores"},
            "ackloop": ack,
            "temporal": {"storages": {"sqlite": _figures(49.0, 6.0)}},
            "dbos": _figures(4.0, 32.0) | {"postgres": "15"},
            "restate": _figures(3.0, 91.0)}


def test_every_engine_is_a_series() -> None:
    names = [name.split("\n")[0] for name in chart._series(_result())]
    assert names == ["ackloop", "ackloop", "Temporal", "DBOS", "Restate"]


def test_the_drawn_chart_has_a_bar_per_engine_and_na_where_one_lacks_a_figure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    drawn: list[Any] = []
    monkeypatch.setattr(plt, "close", drawn.append)
    out = chart.draw(_result(), tmp_path / "bench.png")
    assert out.stat().st_size > 10_000
    [fig] = drawn
    assert chart.TITLE in fig._suptitle.get_text()
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == len(chart.PANELS)
    for ax in panels:
        ticks = [t.get_text().split("\n")[0] for t in ax.get_xticklabels()]
        assert ticks == ["ackloop", "ackloop", "Temporal", "DBOS", "Restate"]
    # The emulator's push ran no concurrent phase: its bar says so.
    at_200 = next(ax for ax in panels if ax.get_title().startswith("runs/s at 200"))
    labels = [text.get_text() for text in at_200.texts]
    assert labels == ["35.0", "n/a", "6.0", "32.0", "91.0"]
    monkeypatch.undo()
    plt.close(fig)
