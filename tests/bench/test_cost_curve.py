"""The monthly cost curves: ackloop costs per run only, a peer its fixed part plus its runs, and
the volume where they cross."""

from __future__ import annotations

from pathlib import Path

import pytest

from ackloop_dev.bench.cost_curve import (
    PEER_PRICES,
    REFERENCE_RUN,
    PeerPrices,
    ackloop_usd_per_run,
    crossover,
    curves,
    draw,
    per_run_from_bench,
)


def test_ackloop_costs_nothing_idle_and_a_peer_its_fixed_part() -> None:
    peer = PeerPrices("vm", 50.0, 0.0, "ASSUMED: test")
    lines = curves([0.0, 1_000.0], 0.001, [peer])
    assert lines == {"ackloop": [0.0, 1.0], "vm": [50.0, 50.0]}
    assert crossover(50.0, 0.0, 0.001) == pytest.approx(50_000)
    assert crossover(50.0, 0.002, 0.001) is None


def test_every_peer_price_says_it_is_an_assumption() -> None:
    assert all(p.assumed and p.basis.startswith("ASSUMED") for p in PEER_PRICES)


def test_ackloop_per_run_from_counts_and_from_a_bench_json() -> None:
    assert 0 < ackloop_usd_per_run(REFERENCE_RUN) < 0.001
    bench = {"ackloop": {"sequential": {"per_run": {"docs_read": 15.0, "docs_written": 17.0,
                                                    "published": 5.0, "deliveries": 6.0},
                                        "function_cpu_ms_per_run": 85.0}}}
    assert per_run_from_bench(bench) == REFERENCE_RUN


def test_the_chart_is_drawn(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = draw([100.0, 1000.0], curves([100.0, 1000.0], 0.00002), tmp_path / "c.png")
    assert out.stat().st_size > 10_000
