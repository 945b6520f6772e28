"""The ackloop side of ``ackloop bench``, end to end on the emulators, with a tiny config.

Hard checks on what the functions counted (documents, requests, publishes, deliveries) and on
the shape of the result; no timing assertions (timing belongs in the benchmark's output).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.support.emulators import EmulatorSession

from ackloop.bench import report
from ackloop.bench.ackloop_side import AckloopBenchConfig, Level, measure_ackloop
from ackloop.bench.targets import check_targets

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

TINY = AckloopBenchConfig(
    warmup=Level(2, 2),
    warmup_runs=1,
    sequential_runs=2,
    concurrency=(Level(3, 3),),
    growth_calls=(1, 4),
    growth_runs=1,
    cold_starts=1,
    contention_transactions=0,
    emulator_push_runs=1,
    emulator_push_level=None,
    probe_floors=False,
    run_timeout_s=60.0,
)


@pytest.fixture(scope="module")
def result(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, Any]:
    workdir: Path = tmp_path_factory.mktemp("bench")
    ports = (emulator_session.pubsub_port, emulator_session.firestore_port)
    return asyncio.run(measure_ackloop(TINY, workdir, emulator_ports=ports))


def test_every_run_completes_with_five_steps(result: dict[str, Any]) -> None:
    seq = result["sequential"]
    assert (seq["runs"], seq["completed"], seq["steps"]) == (2, 2, 10)
    assert seq["steps"] == seq["expected_steps"]
    assert result["emulator_push"]["sequential"]["completed"] == 1
    (phase,) = result["concurrent"]
    assert (phase["concurrency"], phase["completed"], phase["steps"]) == (3, 3, 15)


def test_publishes_and_deliveries_are_one_per_step_plus_the_answer(result: dict[str, Any]) -> None:
    per_run = result["sequential"]["per_run"]
    # query -> ingest, 3 model steps, 2 tool steps; 5 step triggers + the answer
    assert per_run["deliveries"] == 6
    assert per_run["published"] == 6
    assert per_run["redelivered"] == 0


def test_firestore_requests_per_step_stay_within_four(result: dict[str, Any]) -> None:
    per_step = result["sequential"]["per_step"]
    per_run = result["sequential"]["per_run"]
    assert per_step["requests"] <= 4
    assert per_run["transactions"] == 0
    assert per_run["docs_read"] > 0 and per_run["bytes_read"] > 0
    counted = result["sequential"]["counted"]
    assert set(counted) == {"ingest", "model_step", "tool_step", "total"}


def test_reads_per_step_do_not_grow_with_the_conversation(result: dict[str, Any]) -> None:
    short, long = result["growth"]["rows"]
    assert (short["steps_per_run"], long["steps_per_run"]) == (3, 9)
    assert short["completed"] == long["completed"] == 1
    # Per model/tool pair: run + previous steps + transcript chunk, and the run: a constant.
    assert all(row["per_step"]["docs_read"] <= 2.5 for row in (short, long))
    assert long["per_step"]["requests"] <= short["per_step"]["requests"] + 0.5


def test_process_figures_and_report(result: dict[str, Any]) -> None:
    assert set(result["peak_rss_mib"]) == {"ingest", "model_step", "tool_step"}
    assert all(v["largest"] > 0 for v in result["peak_rss_mib"].values())
    assert set(result["cold_start"]["seconds"]) == {"ingest", "model_step", "tool_step"}
    targets = check_targets(result, None)
    assert {t["name"] for t in targets} >= {"Firestore requests per step <= 4"}
    text = report.render({"ackloop": result, "targets": targets})
    assert "ackloop (push bridge)" in text and "Firestore requests" in text
