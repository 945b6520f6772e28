"""What a month of reference runs costs on each engine, idle included: a curve over runs a month.

``python -m ackloop_dev.bench.cost_curve [--bench-json FILE] [--out PNG] [--json FILE]``

ackloop's cost is per run only (every service scales to zero; Firestore's storage of finished
runs is left out): :func:`ackloop_dev.bench.pricing.cost_per_1000_runs` at the runtime's dated
list prices (:data:`ackloop.domain.cost.PRICES`), from one reference run's counts, by default
:data:`REFERENCE_RUN`, or the sequential phase of an ``ackloop bench`` JSON. The peers cost
what they hold running whether or not a run comes, plus (Temporal Cloud) a price per action.
Their prices in :data:`PEER_PRICES` are ASSUMPTIONS written down from memory of the vendors'
public list prices, not checked against the vendors' pages: each says so, and the chart says so.
Capacity is left out: one small instance of each peer is assumed to carry every volume drawn.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ackloop.domain.cost import PRICES
from ackloop_dev.bench.pricing import cost_per_1000_runs

REFERENCE_RUN = {"docs_read": 15.0, "docs_written": 17.0, "published": 6.0, "deliveries": 7.0,
                 "function_requests": 6.0, "function_cpu_s": 0.085}
"""One reference run (5 steps), from the step profile of the engine at afdfc06 (11-step runs:
3.0 documents read, 3.36 written and 17 ms of function CPU per step; one publish and one push
per step, plus the client's query and ingest's push; and the answer's delivery to the caller's
consumer, which is no function's request)."""

HOURS_PER_MONTH = 730.0


@dataclass(frozen=True)
class PeerPrices:
    """A peer's monthly fixed cost and price per run, and where the figures come from."""

    name: str
    fixed_usd_month: float
    usd_per_run: float
    basis: str
    assumed: bool = True


PEER_PRICES = (
    PeerPrices("Temporal Cloud", 100.0 + 0.0335 * HOURS_PER_MONTH, 6 * 50.0 / 1_000_000,
               "ASSUMED: Essentials plan $100/month minimum; $50 per million actions, 6 actions "
               "a run (start + 5 activities), the plan's included actions ignored; the worker on "
               "one e2-small VM ($0.0335/h)"),
    PeerPrices("DBOS on Cloud SQL", 0.035 * HOURS_PER_MONTH + 1.7 + 0.0335 * HOURS_PER_MONTH,
               0.0,
               "ASSUMED: Cloud SQL for PostgreSQL db-g1-small ($0.035/h) with 10 GB SSD "
               "($0.17/GB-month), the application on one e2-small VM ($0.0335/h)"),
    PeerPrices("Restate on a VM", 0.067 * HOURS_PER_MONTH + 1.0, 0.0,
               "ASSUMED: restate-server and the service on one e2-medium VM ($0.067/h) with "
               "10 GB balanced disk ($0.10/GB-month)"),
)


def ackloop_usd_per_run(per_run: dict[str, float]) -> float:
    """ackloop's list-price cost of one run with these counts (no fixed part)."""
    return float(cost_per_1000_runs(per_run)["total_usd"]) / 1000


def monthly_usd(fixed: float, per_run: float, runs: float) -> float:
    """A month's cost at ``runs`` runs: what is held running, plus what each run costs."""
    return fixed + per_run * runs


def curves(volumes: Sequence[float], ackloop_per_run: float,
           peers: Sequence[PeerPrices] = PEER_PRICES) -> dict[str, list[float]]:
    """Each engine's monthly cost at each volume (runs a month)."""
    lines = {"ackloop": [round(monthly_usd(0.0, ackloop_per_run, v), 4) for v in volumes]}
    for peer in peers:
        lines[peer.name] = [round(monthly_usd(peer.fixed_usd_month, peer.usd_per_run, v), 4)
                            for v in volumes]
    return lines


def crossover(fixed: float, per_run: float, ackloop_per_run: float) -> float | None:
    """Runs a month above which a peer with this fixed cost and price per run is cheaper than
    ackloop; None when it never is."""
    saving = ackloop_per_run - per_run
    return fixed / saving if saving > 0 else None


def per_run_from_bench(result: dict[str, Any]) -> dict[str, float]:
    """One reference run's counts from an ``ackloop bench`` JSON (its sequential phase)."""
    seq = result["ackloop"]["sequential"]
    per_run = seq["per_run"]
    return {"docs_read": per_run["docs_read"], "docs_written": per_run["docs_written"],
            "published": per_run["published"] + 1, "deliveries": per_run["deliveries"] + 1,
            "function_requests": per_run["deliveries"],
            "function_cpu_s": seq["function_cpu_ms_per_run"] / 1000}


def draw(volumes: Sequence[float], lines: dict[str, list[float]], path: Path) -> Path:
    """The curves on log-log axes, with the prices' basis under them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6.5))
    # Two peers may cost nearly the same: a line style each keeps both visible.
    for (name, values), style in zip(lines.items(), ("-", "--", "-.", ":", "-"), strict=False):
        ax.plot(volumes, values, label=name, marker="o", markersize=3, linestyle=style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("reference runs a month (model -> tool -> model -> tool -> model)")
    ax.set_ylabel("USD a month, idle included")
    ax.set_title("Monthly cost at list prices")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    note = (f"ackloop: Google Cloud list prices of {PRICES.date}, per run only (scales to "
            "zero).\nPeers: ASSUMED prices, not checked (see cost_curve.PEER_PRICES); "
            "capacity not modelled.")
    fig.text(0.01, 0.01, note, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


VOLUMES = tuple(float(10 ** (e / 2)) for e in range(4, 17))
"""100 to 100 million runs a month, two points a decade."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench-json", type=Path,
                        help="take ackloop's per-run counts from this ackloop bench JSON")
    parser.add_argument("--out", type=Path, default=Path("bench-results/cost_curve.png"))
    parser.add_argument("--json", type=Path, help="also write the curves here")
    args = parser.parse_args(argv)
    per_run = (per_run_from_bench(json.loads(args.bench_json.read_text()))
               if args.bench_json else REFERENCE_RUN)
    ackloop = ackloop_usd_per_run(per_run)
    lines = curves(VOLUMES, ackloop)
    print(f"ackloop: ${ackloop * 1_000_000:.2f} per million runs, nothing idle")
    for peer in PEER_PRICES:
        runs = crossover(peer.fixed_usd_month, peer.usd_per_run, ackloop)
        where = f"cheaper above {runs:,.0f} runs a month" if runs else "never cheaper"
        print(f"{peer.name}: ${peer.fixed_usd_month:.2f} a month idle, "
              f"${peer.usd_per_run * 1_000_000:.2f} per million runs; {where} ({peer.basis})")
    print(f"chart: {draw(VOLUMES, lines, args.out)}")
    if args.json is not None:
        args.json.write_text(json.dumps({"ackloop_per_run": per_run, "ackloop_usd_per_run":
                                         ackloop, "volumes": list(VOLUMES), "curves": lines,
                                         "peers": [asdict(p) for p in PEER_PRICES],
                                         "prices_date": PRICES.date}, indent=2))


if __name__ == "__main__":
    main()
