"""The monthly cost curves: ackloop costs per run only, a peer its fixed part plus its billed
units past those its plan includes, and the volumes where a peer is the cheaper."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ackloop_dev.bench.cost_curve import (
    REFERENCE_RUN,
    ackloop_usd_per_run,
    cheaper_between,
    curves,
    draw,
    per_run_from_bench,
    write,
)
from ackloop_dev.bench.peer_prices import PEER_PRICES, PeerPrices, Price


def _peer(fixed: float, per_unit: float, included: float = 0.0) -> PeerPrices:
    return PeerPrices("vm", fixed, per_unit, 2.0, "test",
                      (Price("x", 1.0, "USD", "https://example.com"),), included)


def test_ackloop_costs_nothing_idle_and_a_peer_its_fixed_part_then_its_units() -> None:
    lines = curves([0.0, 1_000.0, 2_000.0], 0.001, [_peer(50.0, 0.01, included=2_000.0)])
    assert lines == {"ackloop": [0.0, 1.0, 2.0], "vm": [50.0, 50.0, 70.0]}


def test_where_a_peer_is_cheaper() -> None:
    assert cheaper_between(_peer(50.0, 0.0), 0.001) == (pytest.approx(50_000), None)
    assert cheaper_between(_peer(50.0, 0.001), 0.001) is None
    # Cheaper per run than ackloop: above where its fixed part is made up.
    assert cheaper_between(_peer(50.0, 0.0001), 0.001) == (pytest.approx(62_500), None)
    # Dearer per run, but its included units carry it past ackloop for a while.
    low, high = cheaper_between(_peer(50.0, 0.01, included=200_000.0), 0.001) or (0, 0)
    assert (low, high) == (pytest.approx(50_000), pytest.approx(1_950_000 / 19))
    assert cheaper_between(_peer(50.0, 0.01, included=20_000.0), 0.001) is None


def test_every_peer_price_names_its_source_and_date_or_says_why_not() -> None:
    names = {p.name for p in PEER_PRICES}
    assert {"Temporal Cloud", "Inngest", "DBOS (self-hosted)", "Restate (self-hosted)"} <= names
    for peer in PEER_PRICES:
        assert peer.prices
        for price in peer.prices:
            assert price.source.startswith("https://") and price.read
    assert any(p.unverified for peer in PEER_PRICES for p in peer.prices)


def test_ackloop_per_run_from_counts_and_from_a_bench_json() -> None:
    assert 0 < ackloop_usd_per_run(REFERENCE_RUN) < 0.001
    bench = {"ackloop": {"sequential": {"per_run": {"docs_read": 13.0, "docs_written": 10.0,
                                                    "published": 6.0, "deliveries": 6.0},
                                        "function_cpu_ms_per_run": 50.0}}}
    assert per_run_from_bench(bench) == {"docs_read": 13.0, "docs_written": 10.0,
                                         "published": 7.0, "deliveries": 7.0,
                                         "function_requests": 6.0, "function_cpu_s": 0.05}


def test_the_chart_and_its_figures_are_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = draw([100.0, 1000.0], curves([100.0, 1000.0], 0.00002), tmp_path / "c.png")
    assert out.stat().st_size > 10_000
    text = write(REFERENCE_RUN, tmp_path / "curve.png", tmp_path / "curve.json", "test")
    assert text[0].startswith("ackloop: $") and text[-1].endswith("curve.png")
    figures = json.loads((tmp_path / "curve.json").read_text())
    assert set(figures["curves"]) == {"ackloop", *(p.name for p in PEER_PRICES)}
