"""Property-based fuzz of every push endpoint (ingest, model_step, tool_step, dead_letter) with
forged and malformed envelopes, against real runs: finished ones, one whose model call is in
flight and one whose tool call is in flight.

After each batch: no 5xx, no hang past the service's request timeout, and nothing written but
one poison (or dead-letter) record per envelope. At the end: the live runs completed as their
model decided, every ledger holds only steps a committed model step asked for, and the tool
sandbox served no call that a ledger does not record.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.envelopes import Target, envelope
from tests.security.figures import FIGURES
from tests.security.probes import (
    Probe,
    all_runs,
    changed,
    documents,
    failures,
    finish_all,
    ledger,
    ledger_problems,
    own_record,
    send,
    under,
    unrecorded_tool_calls,
    wait_for,
)
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.timeout(420)]

MODEL_HOLD_S = 30
"""The model call of one live run answers after this long (fake Gemini ``delay``)."""
TOOL_HOLD_S = 25
"""The tool call of the other live run answers after this long (the sandbox's ``/ip``)."""
EXAMPLES = 40


def target_of(stack: RunningStack, run_id: str, *, live: bool = False,
              request_id: str = "") -> Target:
    turns: list[tuple[tuple[str, dict[str, Any]], ...]] = []
    for step in sorted(ledger(stack, run_id), key=lambda s: s.key):
        if step.kind == "model" and step.completed_at is not None:
            calls = [(o.data["call"]["name"], o.data["call"].get("args") or {})
                     for o in step.outbox if o.target_step and "-tool-" in o.target_step]
            if calls:
                turns.append(tuple(calls))
    return Target(run_id, tuple(turns), live=live, request_id=request_id)


def test_forged_and_malformed_envelopes(security_stack: RunningStack) -> None:
    stack = security_stack
    # Finished runs with real ledgers: three tool turns, one, and none.
    finished = {stack.ask(q, request_id=f"sec-{i}-{int(time.time())}"): q for i, q in enumerate(
        ["are there any weather alerts where I am?", "what is my ip address?",
         "weather alerts for CA", "write a haiku about rain"])}
    for run_id in finished:
        run, _ = asyncio.run(stack.wait_run(run_id, timeout=90))
        assert run.status.value == "completed", run
    # Live run 1: its first model call is held by the upstream (a streamed turn of function
    # calls runs unclaimed: the model server, not the ledger, says the call is under way).
    stack.schedule_model_faults(f"delay:{MODEL_HOLD_S}")
    held_model = stack.ask("what is my ip address?", request_id=f"sec-live-model-{time.time_ns()}")
    wait_for("the held model call",
             lambda: stack.model_stats()["faults_served"].get("delay", 0) > 0, 30)
    # Live run 2: its tool call is held by the sandbox.
    stack.set_sandbox_faults(delay_seconds=TOOL_HOLD_S, paths=["/ip"])
    held_tool = stack.ask("what is my ip address?", request_id=f"sec-live-tool-{time.time_ns()}")
    wait_for("the held tool call", lambda: any(
        s.key == "0000-tool-000" for s in ledger(stack, held_tool)), 30)

    targets = [target_of(stack, r) for r in finished] + [
        target_of(stack, held_model, live=True), target_of(stack, held_tool, live=True),
        Target("run-0000000000000000000000000000dead"), Target("no-such-run")]
    live_runs = {held_model, held_tool}
    live_conversations = {r.get("conversation_id") for r in all_runs(stack)
                          if r["run_id"] in live_runs}
    problems: list[str] = []

    @given(batch=st.lists(envelope(targets), min_size=1, max_size=6))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def fuzz(batch: list[Probe]) -> None:
        before = documents(stack)
        answers = send(stack, batch)
        after = documents(stack)
        problems.extend(failures(answers))
        written = {p for p in changed(before, after)
                   if not under(stack, p, live_runs, live_conversations)}
        records = {p for p in written if own_record(stack, p)}
        illegal = sorted(written - records)
        if len(records) > len(batch):
            illegal.append(f"{len(records)} poison/dead-letter records for {len(batch)} envelopes")
        if illegal:
            FIGURES.rejected_writes += len(illegal)
            FIGURES.sample(f"written by {[a.probe.label for a in answers]}: {illegal[:5]}")
            problems.append(f"documents written by {[a.describe() for a in answers]}: "
                            f"{illegal[:8]}")

    fuzz()
    # Oversized bodies, declared and chunked, on every function.
    big = b'{"message": {"messageId": "x", "data": "' + b"A" * (13 * 1024 * 1024) + b'"}}'
    problems += failures(send(stack, [
        Probe(s, "POST", "/", big, (("content-type", "application/json"),), label="13 MiB body")
        for s in ("ingest", "model_step", "tool_step", "dead_letter")]))

    stack.set_sandbox_faults(delay_seconds=0, paths=[])
    runs = {r["run_id"]: r for r in finish_all(stack, MODEL_HOLD_S + 120)}
    for run_id in live_runs:
        run = runs[run_id]
        if run.get("status") != "completed":
            problems.append(f"live run {run_id} ended {run.get('status')}: {run.get('error')}")
    for run_id in runs:
        for problem in ledger_problems(ledger(stack, run_id)):
            problems.append(f"run {run_id}: {problem}")
    extra = unrecorded_tool_calls(stack)
    FIGURES.forged_steps_executed += sum(extra.values())
    if extra:
        problems.append(f"tool calls no ledger records, by sandbox endpoint: {extra}")
        FIGURES.sample(f"forged tool calls executed: {extra}")
    assert not problems, "\n".join(problems[:40])
