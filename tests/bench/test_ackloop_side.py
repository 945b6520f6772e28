"""The ackloop side of ``ackloop bench``, end to end on the emulators, with a tiny config.

Hard checks on what the functions counted (documents, requests, publishes), on what the push
delivery pushed and saw answered (one push per step and per query, no non-2xx), and on the shape
of the result; no timing assertions (timing belongs in the benchmark's output).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from tests.support.emulators import EmulatorSession

from ackloop_dev.bench import report
from ackloop_dev.bench.ackloop_side import AckloopBenchConfig, Level, measure_ackloop
from ackloop_dev.bench.targets import check_targets

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
    # Published: 5 step triggers + the answer. Pushed (by the push delivery): query -> ingest,
    # 3 model steps, 2 tool steps.
    assert per_run["deliveries"] == 6
    assert per_run["published"] == 6
    assert per_run["redelivered"] == 0


def test_firestore_requests_per_step_stay_within_four(result: dict[str, Any]) -> None:
    per_step = result["sequential"]["per_step"]
    per_run = result["sequential"]["per_run"]
    # Round trips of a reference run: ingest 1 (run + conversation in one commit); model step
    # of turn 0: 4 (run get, then step create, transcript query, commit); each tool step 3 (run
    # + its model step in one batch get, create, commit); the next model step 4 (previous
    # turn's range, run + transcript chunks in one batch get, create, commit); the last one 5
    # (+ the conversation, read by the commit that ends the run). 1 + 4 + 3 + 4 + 3 + 5 = 20.
    assert per_run["requests"] <= 20
    assert per_step["requests"] <= 4
    assert per_run["transactions"] == 0
    assert per_run["docs_read"] > 0 and per_run["bytes_read"] > 0
    counted = result["sequential"]["counted"]
    assert set(counted) == {"ingest", "model_step", "tool_step", "total"}


def reads_budget(tool_calls: int) -> int:
    """Documents a run of ``tool_calls`` turns of one call each reads (the documents found; a
    lookup of a step's own document that does not exist yet finds none), from the code path.

    ingest 0 (the run is created alone, nothing read: its conversation's document is created
    by its end); the model step of turn 0: 1 (the run, with its own step's document; a new
    conversation's transcript is known to be empty); each tool step: 2 (the run and the model
    step whose committed call it runs, with its own document, in one batch get; a single call
    needs no join query); each later model step: 4 (the run, the previous turn's model and tool
    step, the one transcript chunk, with its own document, in one batch get); the last model
    step: nothing more (its commit creates the conversation's document without reading it).
    6 per model/tool pair + 1 per run, within 6n + 3.
    """
    return 6 * tool_calls + 3


def test_reads_per_step_do_not_grow_with_the_conversation(result: dict[str, Any]) -> None:
    short, long = result["growth"]["rows"]
    assert (short["steps_per_run"], long["steps_per_run"]) == (3, 9)
    assert short["completed"] == long["completed"] == 1
    for row in (short, long):
        assert row["per_run"]["docs_read"] <= reads_budget(row["tool_calls"]), row["counted"]
    # Constant per turn: each turn the longer run adds reads no more than a turn's budget (a
    # read that grows with the conversation, e.g. every earlier step or one chunk per turn,
    # would read more at every later turn).
    extra_turns = long["tool_calls"] - short["tool_calls"]
    per_turn = (long["per_run"]["docs_read"] - short["per_run"]["docs_read"]) / extra_turns
    assert per_turn <= 6, (short["counted"], long["counted"])
    assert long["per_step"]["requests"] <= short["per_step"]["requests"] + 0.5


def test_no_push_is_answered_non_2xx_in_the_fault_free_phases(result: dict[str, Any]) -> None:
    answered = result["push_answers"]
    seq = result["sequential"]
    # Every phase the push delivery delivered: sequential, the concurrent level, both growth runs.
    assert answered["phases"] == 4
    # One push per step, plus the query's push to ingest (answered 200 with the run) per run.
    runs = seq["runs"] + result["concurrent"][0]["runs"] + sum(
        row["runs"] for row in result["growth"]["rows"])
    assert answered["steps"] == 10 + 15 + 3 + 9
    assert answered["by_status"] == {"200": runs, "204": answered["steps"]}
    assert (answered["non_2xx"], answered["non_2xx_per_1000_steps"]) == (0, 0.0)
    # The sequential phase's pushes are its figure of deliveries: two runs of six pushes.
    assert seq["push_answers"]["by_status"] == {"200": 2, "204": 10}
    assert seq["counted"]["total"]["deliveries"] == seq["push_answers"]["pushes"] == 12
    # The emulator's own push counts nothing, so its phases have no figure of pushes.
    emulated = result["emulator_push"]["sequential"]
    assert emulated["push_answers"] is None and "deliveries" not in emulated["per_run"]
    (target,) = [t for t in check_targets(result, None) if "non-2xx" in t["name"]]
    assert target["holds"] and target["measured"] == f"0 (0 of {37 + runs} pushes, 37 steps)"


def test_process_figures_and_report(result: dict[str, Any]) -> None:
    assert set(result["peak_rss_mib"]) == {"ingest", "model_step", "tool_step"}
    assert all(v["largest"] > 0 for v in result["peak_rss_mib"].values())
    assert set(result["cold_start"]["seconds"]) == {"ingest", "model_step", "tool_step"}
    targets = check_targets(result, None)
    assert {t["name"] for t in targets} >= {"Firestore requests per step <= 2.2",
                                            "Firestore documents written per step <= 2.2"}
    text = report.render({"ackloop": result, "targets": targets})
    assert "| figure | ackloop (push delivery) | ackloop (emulator push) |" in text
    assert "non-2xx push answers per 1,000 steps (push delivery's /_stats, fault-free " \
           "phases): **0** (0 of 44 pushes over 37 steps; by answer: 200: 7, 204: 37)" in text
    assert "Firestore requests" in text
