"""What 1,000 runs cost at Google's published list prices, from the counted operations.

Prices are list prices in USD, without free tiers or committed-use discounts:

- Firestore Standard edition, regional ``us-central1``: document reads $0.03, writes $0.09,
  deletes $0.01 per 100,000 (multi-region ``nam5`` is twice that).
- Pub/Sub: $40 per TiB of throughput; each publish, push or pull *request* is billed at least
  1,000 bytes, so a small message costs 1,000 bytes to publish and 1,000 to deliver.
- Cloud Run (request-based billing, tier 1): $0.40 per million requests, $0.000024 per
  vCPU-second, $0.0000025 per GiB-second. The CPU part here is the function processes'
  measured CPU time: a lower bound, because an instance is billed while a request is open.

Source: cloud.google.com/firestore/pricing, /pubsub/pricing and /run/pricing, as stored on
:data:`PRICES_DATE`. Check the pages before quoting a bill.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PRICES_DATE = "2026-11-30"
TIB = 2**40


@dataclass(frozen=True)
class ListPrices:
    """USD list prices; each attribute is the price of one unit."""

    firestore_read: float = 0.03 / 100_000
    """One document read (Standard edition, us-central1)."""
    firestore_write: float = 0.09 / 100_000
    """One document write (Standard edition, us-central1)."""
    pubsub_byte: float = 40.0 / TIB
    """One byte of publish or delivery throughput."""
    pubsub_min_request_bytes: int = 1000
    """The least a publish, push or pull request is billed."""
    run_request: float = 0.40 / 1_000_000
    """One Cloud Run request (a push delivery)."""
    run_vcpu_second: float = 0.000024
    """One vCPU-second of Cloud Run (tier 1, request-based billing)."""


def cost_per_1000_runs(
    per_run: dict[str, float], prices: ListPrices | None = None
) -> dict[str, Any]:
    """Cost in USD of 1,000 runs from per-run counts.

    ``per_run`` holds ``docs_read``, ``docs_written``, ``published`` (messages published by the
    functions and the client's query), ``deliveries`` (push requests) and ``function_cpu_s``.
    Every message is small (well under 1,000 bytes), so each publish and each delivery is billed
    the 1,000-byte minimum.
    """
    p = prices or ListPrices()
    runs = 1000
    firestore = runs * (per_run["docs_read"] * p.firestore_read
                        + per_run["docs_written"] * p.firestore_write)
    pubsub_requests = per_run["published"] + per_run["deliveries"]
    pubsub = runs * pubsub_requests * p.pubsub_min_request_bytes * p.pubsub_byte
    run_requests = runs * per_run["deliveries"] * p.run_request
    run_cpu = runs * per_run["function_cpu_s"] * p.run_vcpu_second
    total = firestore + pubsub + run_requests + run_cpu
    return {
        "firestore_usd": round(firestore, 5),
        "pubsub_usd": round(pubsub, 5),
        "cloud_run_requests_usd": round(run_requests, 5),
        "cloud_run_cpu_usd": round(run_cpu, 5),
        "total_usd": round(total, 5),
        "prices": asdict(p),
        "prices_date": PRICES_DATE,
        "prices_note": "list prices, USD, no free tier: Firestore Standard us-central1, "
        "Pub/Sub $40/TiB with a 1,000-byte minimum per request, Cloud Run tier 1",
    }
