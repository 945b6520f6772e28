"""The benchmark prices its counts with the runtime's one price table."""

from __future__ import annotations

import pytest

from ackloop.domain.cost import PRICE_TABLE_DATE, PRICES, PriceTable
from ackloop_dev.bench.pricing import cost_per_1000_runs

PER_RUN = {"docs_read": 10.0, "docs_written": 8.0, "published": 6.0, "deliveries": 6.0,
           "function_cpu_s": 0.5}


def test_the_benchmark_uses_the_runtime_price_table_and_its_date() -> None:
    cost = cost_per_1000_runs(PER_RUN)
    assert cost["prices_date"] == PRICE_TABLE_DATE
    assert cost["firestore_usd"] == pytest.approx(
        1000 * (10 * PRICES.firestore_read + 8 * PRICES.firestore_write), abs=1e-5)
    assert cost["pubsub_usd"] == pytest.approx(1000 * 12 * 1000 * PRICES.pubsub_byte, abs=1e-5)
    assert cost["prices"]["run_vcpu_second"] == PRICES.run_vcpu_second
    assert cost["cloud_run_requests_usd"] == pytest.approx(1000 * 6 * PRICES.run_request,
                                                           abs=1e-5)


def test_the_answers_delivery_to_the_callers_consumer_is_no_cloud_run_request() -> None:
    """Pub/Sub bills the answer's delivery; Cloud Run bills only the pushes to the functions."""
    with_answer = PER_RUN | {"deliveries": 7.0, "function_requests": 6.0}
    cost = cost_per_1000_runs(with_answer)
    assert cost["pubsub_usd"] == pytest.approx(1000 * 13 * 1000 * PRICES.pubsub_byte, abs=1e-5)
    assert cost["cloud_run_requests_usd"] == pytest.approx(1000 * 6 * PRICES.run_request,
                                                           abs=1e-5)


def test_other_prices_change_the_benchmarks_cost() -> None:
    doubled = PriceTable(firestore_read=2 * PRICES.firestore_read,
                         firestore_write=2 * PRICES.firestore_write)
    assert cost_per_1000_runs(PER_RUN, doubled)["firestore_usd"] == pytest.approx(
        2 * cost_per_1000_runs(PER_RUN)["firestore_usd"], abs=1e-5)
