"""What 1,000 runs cost at Google's published list prices, from the counted operations.

The prices are the runtime's dated price table, :data:`ackloop.domain.cost.PRICES` (its module
docstring names the pages and the date): list prices in USD, without free tiers or
committed-use discounts. The Cloud Run CPU part here is the function processes' measured CPU
time: a lower bound, because an instance is billed while a request is open.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ackloop.domain.cost import PRICES, PUBSUB_MIN_BYTES, PriceTable


def billed_per_run(phase: dict[str, Any]) -> dict[str, float]:
    """The billed counts of one run from a phase of the ackloop bench (its ``per_run`` counts
    and ``function_cpu_ms_per_run``), as :func:`cost_per_1000_runs` takes them.

    The client publishes each query; a consumer of the caller's receives each answer (a Pub/Sub
    delivery, not a request to a function).
    """
    per_run = phase["per_run"]
    return {
        "docs_read": per_run["docs_read"],
        "docs_written": per_run["docs_written"],
        "published": per_run["published"] + 1,
        "deliveries": per_run["deliveries"] + 1,
        "function_requests": per_run["deliveries"],
        "function_cpu_s": phase["function_cpu_ms_per_run"] / 1000,
    }


def cost_per_1000_runs(
    per_run: dict[str, float], prices: PriceTable = PRICES
) -> dict[str, Any]:
    """Cost in USD of 1,000 runs from per-run counts.

    ``per_run`` holds ``docs_read``, ``docs_written``, ``published`` (messages published by the
    functions and the client's query), ``deliveries`` (every delivery Pub/Sub makes: the pushes
    to the functions and the answer to its consumer), ``function_requests`` (the pushes to the
    functions: what Cloud Run bills as requests; default ``deliveries``) and
    ``function_cpu_s``. The answer's consumer is the caller's own subscriber, not a function of
    the deployment, so its delivery is Pub/Sub throughput but no Cloud Run request. Every
    message is small (well under 1,000 bytes), so each publish and each delivery is billed the
    1,000-byte minimum.
    """
    runs = 1000
    firestore = runs * (per_run["docs_read"] * prices.firestore_read
                        + per_run["docs_written"] * prices.firestore_write)
    pubsub_requests = per_run["published"] + per_run["deliveries"]
    pubsub = runs * pubsub_requests * PUBSUB_MIN_BYTES * prices.pubsub_byte
    function_requests = per_run.get("function_requests", per_run["deliveries"])
    run_requests = runs * function_requests * prices.run_request
    run_cpu = runs * per_run["function_cpu_s"] * prices.run_vcpu_second
    total = firestore + pubsub + run_requests + run_cpu
    return {
        "firestore_usd": round(firestore, 5),
        "pubsub_usd": round(pubsub, 5),
        "cloud_run_requests_usd": round(run_requests, 5),
        "cloud_run_cpu_usd": round(run_cpu, 5),
        "total_usd": round(total, 5),
        "prices": {k: v for k, v in asdict(prices).items() if k not in ("date", "gemini")},
        "prices_date": prices.date,
        "prices_note": "list prices, USD, no free tier: Firestore Standard us-central1, "
        "Pub/Sub $40/TiB with a 1,000-byte minimum per request, Cloud Run tier 1",
    }
