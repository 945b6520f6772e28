"""What one approval costs, measured by ``python -m ackloop_dev.bench.approval_cost`` on the
emulators: the facts the figures in the docs rest on, not the figures themselves.

The measuring function runs a real local stack (functions, API, push delivery, the sweeper at
its shipped interval) behind the counting proxies; the decision goes through
``POST /runs/{id}/approvals/{step}``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support.emulators import EmulatorSession

from ackloop_dev.bench.approval_cost import (
    ApprovalCost,
    RunCost,
    measure,
    render,
    requests_of,
    usd,
)
from ackloop_dev.bench.wire_meter import WireCounts

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


@pytest.fixture(scope="module")
def result(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory
           ) -> ApprovalCost:
    directory: Path = tmp_path_factory.mktemp("approval-cost")
    return measure(directory, pubsub_host=f"127.0.0.1:{emulator_session.pubsub_port}",
                   firestore_host=f"127.0.0.1:{emulator_session.firestore_port}",
                   wait_seconds=3.0)


def test_both_runs_answer_and_leave_the_same_documents(result: ApprovalCost) -> None:
    assert result.without.stop_reason == result.with_approval.stop_reason == "answered"
    assert result.with_approval.documents == result.without.documents > 0


def test_the_approval_adds_operations(result: ApprovalCost) -> None:
    a, b = result.with_approval.counts, result.without.counts
    assert a.firestore_reads > b.firestore_reads
    assert a.firestore_writes > b.firestore_writes
    # The decision is a commit conditional on the step and the run as read: no transaction.
    assert a.transactions == b.transactions == 0
    assert a.delivered > b.delivered  # the decided step is delivered again
    assert a.published > b.published
    assert a.published_by_topic.keys() == b.published_by_topic.keys()
    assert a.firestore_deletes == b.firestore_deletes == 0
    assert usd(a, requests_of(result.with_approval)) > usd(b, requests_of(result.without))


def test_the_apis_decision_is_counted_with_the_functions(result: ApprovalCost) -> None:
    """Every process has its own proxy: the decision's reads and commit are the API's, the
    waiting and the resumed delivery are the tool step's."""
    api = result.with_approval.by_process["api"].minus(result.without.by_process["api"])
    assert api.firestore_reads > 0 and api.firestore_writes > 0
    tool = result.with_approval.by_process["tool_step"].minus(
        result.without.by_process["tool_step"])
    assert tool.firestore_writes > 0
    assert result.with_approval.counts.billed() == total_of(result.with_approval).billed()


def total_of(run: RunCost) -> WireCounts:
    total = WireCounts()
    for counts in run.by_process.values():
        total = total.plus(counts)
    return total


def test_the_wait_itself_costs_nothing_between_sweeps(result: ApprovalCost) -> None:
    """Whatever the waiting window counted is the scheduled sweeper passes in it, at what one
    pass costs while the run waits: nothing else touches Firestore or Pub/Sub."""
    pass_cost = result.sweep_waiting.billed()
    expected = tuple(result.sweeps_during_wait * n for n in pass_cost)
    assert result.wait.billed() == expected
    assert result.sweep_every_s == 60.0


def test_a_sweeper_pass_reads_and_writes_nothing(result: ApprovalCost) -> None:
    for swept in (result.sweep_waiting, result.sweep_idle):
        assert swept.firestore_reads > 0
        assert (swept.firestore_writes, swept.transactions, swept.published) == (0, 0, 0)
    # The waiting run is in the sweeper's query of running runs; with none, the query is empty.
    assert result.sweep_waiting.query_docs > result.sweep_idle.query_docs == 0


def test_the_table_has_the_three_columns_and_the_dollars(result: ApprovalCost) -> None:
    text = render(result)
    assert "with" in text and "without" in text and "difference" in text
    assert "Firestore writes" in text and "USD at list prices" in text
    assert "one sweeper pass while the run waits" in text
