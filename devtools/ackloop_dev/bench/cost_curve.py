"""What a month of reference runs costs on each engine, idle included: a curve over runs a month.

``python -m ackloop_dev.bench.cost_curve [--bench-json FILE] [--out PNG] [--json FILE]``;
``ackloop bench`` draws it too, from the run it has just measured.

ackloop's cost is per run only (every service scales to zero; Firestore's storage of finished
runs is left out): :func:`ackloop_dev.bench.pricing.cost_per_1000_runs` at the runtime's dated
list prices (:data:`ackloop.domain.cost.PRICES`), from one reference run's counts: the
sequential phase of an ``ackloop bench`` JSON, or :data:`REFERENCE_RUN` without one. The peers
cost what they hold running whether or not a run comes, plus what their vendor bills per run:
:data:`ackloop_dev.bench.peer_prices.PEER_PRICES`, each figure with its source and the date it
was read, a figure not checked against the vendor's page marked so (and the peer starred on the
chart). Capacity is left out: one small instance of each self-hosted peer is assumed to carry
every volume drawn.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ackloop.domain.cost import PRICES
from ackloop_dev.bench.peer_prices import PEER_PRICES, PeerPrices
from ackloop_dev.bench.pricing import billed_per_run, cost_per_1000_runs

REFERENCE_RUN = {"docs_read": 13.0, "docs_written": 10.0, "published": 7.0, "deliveries": 7.0,
                 "function_requests": 6.0, "function_cpu_s": 0.042}
"""One reference run (5 steps), the sequential phase of ``ackloop bench --quick`` on a2baa05
(2026-12-04, 2 cores): 13 documents read and 10 written (the run's, one per step, and the run's
end), 6 publishes by the functions plus the client's query, 6 pushes to the functions plus the
answer's delivery to the caller's consumer (no function's request), 42 ms of function CPU."""


def ackloop_usd_per_run(per_run: dict[str, float]) -> float:
    """ackloop's list-price cost of one run with these counts (no fixed part)."""
    return float(cost_per_1000_runs(per_run)["total_usd"]) / 1000


def curves(volumes: Sequence[float], ackloop_per_run: float,
           peers: Sequence[PeerPrices] = PEER_PRICES) -> dict[str, list[float]]:
    """Each engine's monthly cost at each volume (runs a month)."""
    lines = {"ackloop": [round(ackloop_per_run * v, 4) for v in volumes]}
    for peer in peers:
        lines[peer.name] = [round(peer.monthly_usd(v), 4) for v in volumes]
    return lines


def cheaper_between(peer: PeerPrices,
                    ackloop_per_run: float) -> tuple[float, float | None] | None:
    """The runs a month over which ``peer`` costs less than ackloop: (from, to), ``to`` None
    when it stays cheaper at any volume; None when it is never cheaper.

    A peer's month is flat (its fixed part) until its included units are used, then rises by
    its price per run; ackloop's rises from zero by its own."""
    if ackloop_per_run <= 0:
        return None
    flat_until = (peer.included_units / peer.units_per_run if peer.usd_per_run > 0
                  else float("inf"))
    saving = ackloop_per_run - peer.usd_per_run
    meets = peer.fixed_usd_month / ackloop_per_run
    # Where the two meet once the included units are used.
    again = ((peer.fixed_usd_month - peer.included_units * peer.usd_per_unit) / saving
             if saving else float("inf"))
    if meets <= flat_until:
        # Past its included units it rises faster than ackloop, if it does, and meets it again.
        return meets, (again if saving < 0 else None)
    return (again, None) if saving > 0 else None


def per_run_from_bench(result: dict[str, Any]) -> dict[str, float]:
    """One reference run's billed counts from an ``ackloop bench`` JSON (its sequential phase)."""
    return billed_per_run(result["ackloop"]["sequential"])


def _legend(name: str) -> str:
    peer = next((p for p in PEER_PRICES if p.name == name), None)
    return f"{name} *" if peer is not None and peer.unverified else name


def draw(volumes: Sequence[float], lines: dict[str, list[float]], path: Path,
         measured: str = "") -> Path:
    """The curves on log-log axes, with the prices' basis under them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6.8))
    # Two peers may cost the same: a line style and a marker each keep both visible.
    for (name, values), (style, marker) in zip(
            lines.items(), (("-", "o"), ("--", "o"), ("-.", "o"), (":", "s"), ((0, (1, 4)), "x")),
            strict=False):
        ax.plot(volumes, values, label=_legend(name), marker=marker, markersize=4,
                linestyle=style, fillstyle="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("reference runs a month (model -> tool -> model -> tool -> model)")
    ax.set_ylabel("USD a month, idle included")
    ax.set_title("Monthly cost at list prices")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    note = (f"ackloop: {measured or 'REFERENCE_RUN'}; Google Cloud list prices of {PRICES.date}, "
            "per run only (scales to zero).\nPeers: list prices read "
            f"{PEER_PRICES[0].prices[0].read}, sources in peer_prices.py; * rests on a figure "
            "not checked against the vendor's page. Capacity not modelled.")
    fig.text(0.01, 0.01, note, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


VOLUMES = tuple(float(10 ** (e / 2)) for e in range(4, 17))
"""100 to 100 million runs a month, two points a decade."""


def _where(span: tuple[float, float | None] | None) -> str:
    if span is None:
        return "never cheaper than ackloop"
    low, high = span
    if high is None:
        return f"cheaper than ackloop above {low:,.0f} runs a month"
    return f"cheaper than ackloop from {low:,.0f} to {high:,.0f} runs a month"


def summary(per_run: dict[str, float]) -> list[str]:
    """ackloop's cost per million runs, then each peer's month and where it crosses ackloop."""
    ackloop = ackloop_usd_per_run(per_run)
    lines = [f"ackloop: ${ackloop * 1_000_000:.2f} per million runs, nothing idle"]
    for peer in PEER_PRICES:
        mark = " (rests on an unverified figure)" if peer.unverified else ""
        included = (f" past {peer.included_units / peer.units_per_run:,.0f} included"
                    if peer.included_units else "")
        lines.append(f"{peer.name}: ${peer.fixed_usd_month:.2f} a month idle, "
                     f"${peer.usd_per_run * 1_000_000:.2f} per million runs{included}; "
                     f"{_where(cheaper_between(peer, ackloop))}{mark} ({peer.basis})")
    return lines


def write(per_run: dict[str, float], out: Path, json_path: Path | None = None,
          measured: str = "") -> list[str]:
    """Draw the curves for these per-run counts to ``out`` (and their figures to
    ``json_path``); the summary lines, the chart's path last."""
    ackloop = ackloop_usd_per_run(per_run)
    lines = curves(VOLUMES, ackloop)
    text = [*summary(per_run), f"cost curve: {draw(VOLUMES, lines, out, measured)}"]
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps({
            "ackloop_per_run": per_run, "ackloop_usd_per_run": ackloop, "measured": measured,
            "volumes": list(VOLUMES), "curves": lines, "prices_date": PRICES.date,
            "peers": [asdict(p) | {"usd_per_run": p.usd_per_run,
                                   "cheaper_between": cheaper_between(p, ackloop)}
                      for p in PEER_PRICES]}, indent=2))
    return text


def from_bench(result: dict[str, Any], out: Path, json_path: Path | None = None) -> list[str]:
    """:func:`write` from an ``ackloop bench`` result: its measured ackloop run."""
    meta = result.get("meta", {})
    size = "ackloop bench --quick" if meta.get("quick") else "ackloop bench"
    measured = f"the run measured {meta.get('date', '?')} ({size})"
    return write(per_run_from_bench(result), out, json_path, measured)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-json", type=Path,
                        help="take ackloop's per-run counts from this ackloop bench JSON")
    parser.add_argument("--out", type=Path, default=Path("bench-results/cost_curve.png"))
    parser.add_argument("--json", type=Path, help="also write the curves here")
    args = parser.parse_args(argv)
    if args.bench_json:
        text = from_bench(json.loads(args.bench_json.read_text()), args.out, args.json)
    else:
        text = write(REFERENCE_RUN, args.out, args.json, "REFERENCE_RUN")
    print("\n".join(text))


if __name__ == "__main__":
    main()
