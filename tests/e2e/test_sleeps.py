"""Calls that sleep, on a stack of real processes on the emulators, woken by the local task
queue as Cloud Tasks wakes a deployment's: ``ackloop ask`` follows a short sleep to its answer
and leaves a long one saying when it wakes; and while calls sleep, their runs get no push and no
log line, sweeps included. (A call whose time comes while every ackloop process is stopped, run
once they are back: ``tests/e2e/test_waits.py``.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ackloop.domain.keys import run_id_for_request
from ackloop_dev.bench.wake_latency import run as wake_bench
from tests.cli.conftest import Cli
from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

CALL = "0000-tool-000"


async def test_ask_follows_a_short_sleep_to_its_answer_and_leaves_a_long_one(
        stack: RunningStack, tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    directory = stack.state.directory
    short = await asyncio.to_thread(cli, "ask", "--agent", "follow-up",
                                    "follow up on A-1 in 2 s", "--request-id", "sleep-short",
                                    "--directory", directory)
    assert short.returncode == 0, short.stderr
    assert '"followed_up": "A-1"' in short.stdout
    _, steps = await stack.wait_run(run_id_for_request("sleep-short"))
    (call,) = [s for s in steps if s.key == CALL]
    assert call.decision is not None and call.decision.by == "clock" and call.attempts == 1
    assert call.waiting is not None and call.waiting.kind == "time"
    assert call.decision.at >= (call.waiting.wake_at or 0)

    long = await asyncio.to_thread(cli, "ask", "--agent", "follow-up",
                                   "follow up on A-2 in 2 h", "--request-id", "sleep-long",
                                   "--directory", directory)
    run_id = run_id_for_request("sleep-long")
    assert long.returncode == 2, long.stderr
    assert any(line.startswith(f"run {run_id} sleeps in follow_up(") and
               line.endswith("then goes on by itself") for line in long.stderr.splitlines())
    shown = await asyncio.to_thread(cli, "runs", "show", run_id, "--directory", directory)
    assert f"sleeps        {CALL} (follow_up) until " in shown.stdout


def test_sleeping_runs_get_no_push_and_no_log_line_and_all_wake(
        emulator_session: EmulatorSession) -> None:
    ports = (emulator_session.pubsub_port, emulator_session.firestore_port)
    result = wake_bench(runs=4, sleep_s=5.0, sweep_every_s=1.0, emulator_ports=ports)
    asleep = result["while_asleep"]
    assert asleep["wakes_held"] == 4
    assert asleep["sweeps_made"] >= 2  # the sweeper looked while they slept, and left them
    assert (asleep["tool_step_pushes"], asleep["log_lines"]) == (0, 0), asleep
    lateness = result["lateness_s"]
    assert lateness["min"] >= 0, lateness  # each woke at or after its time, none early
    assert lateness["median"] >= 0  # and ran
