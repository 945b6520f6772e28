"""A run through the real stack (the api and step functions as processes, push delivery over the
Pub/Sub emulator): the caller's trace context becomes the run's trace, every response carries
it, and the trace the processes wrote is read back by the API and by `ackloop runs trace`."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest

from ackloop.telemetry import tracing
from tests.api.conftest import api, api_stack  # noqa: F401  (the API tests' stack)
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
STEP_SPANS = ("ackloop.model_step", "ackloop.tool_step")


async def _runs_trace(*args: str) -> subprocess.CompletedProcess[str]:
    """``ackloop runs trace`` as a real process."""
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", "from ackloop.cli.main import app; app()",
                         "runs", "trace", *args], capture_output=True, text=True, timeout=60)


async def test_a_callers_trace_becomes_the_runs_and_every_hop_joins_it(
    api: httpx.AsyncClient, api_stack: RunningStack,  # noqa: F811
) -> None:
    created = await api.post("/runs", json={"text": "What is 2+2?"},
                             headers={"traceparent": CALLER})
    assert created.status_code == 202, created.text
    run_id = created.json()["run_id"]
    root = f"00-{CALLER_TRACE}-{tracing.run_root_span_id(run_id)}-01"
    assert created.headers["traceparent"] == root
    await api_stack.wait_run(run_id)

    shown = await api.get(f"/runs/{run_id}")
    assert shown.headers["traceparent"] == root
    assert shown.json()["trace_id"] == CALLER_TRACE

    steps = await api_stack.store().steps.list_steps(run_id)
    traced = await _whole_trace(api, run_id, {s.key for s in steps})
    spans = traced["spans"]
    assert traced["trace_id"] == CALLER_TRACE
    assert {s["trace_id"] for s in spans} == {CALLER_TRACE}
    ids = {s["span_id"] for s in spans}
    (root_span,) = [s for s in spans if s["parent_span_id"] not in ids]
    assert root_span["name"] == "ackloop.run" and root_span["parent_span_id"] == "00f067aa0ba902b7"
    step_spans = [s for s in spans if s["name"] in STEP_SPANS]
    assert sorted(s["attributes"]["ackloop.step"] for s in step_spans) == sorted(
        s.key for s in steps), "one span per step delivery"
    assert len(spans) == len(step_spans) + 2, "and the run's root and its ingest, nothing else"
    model = next(s for s in step_spans if s["name"] == "ackloop.model_step")
    assert {"firestore.commit", "gemini.generate_content"} <= {e["name"] for e in model["events"]}
    assert {s["service"] for s in spans} >= {"api", "model_step"}

    cli = await _runs_trace(run_id, "--directory", api_stack.state.directory)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    assert lines[0].startswith(f"run {run_id}  trace {CALLER_TRACE}  {len(spans)} span(s)")
    assert any(line.lstrip().startswith("· firestore.commit  ") for line in lines), \
        "a span's events are shown under it"
    assert lines[1].startswith("ackloop.run  ")
    assert any(line.startswith("  ackloop.ingest  ") for line in lines)
    assert any(line.lstrip().startswith("ackloop.model_step") and "step=0000-model" in line
               for line in lines)
    as_json = await _runs_trace(run_id, "--json", "--directory", api_stack.state.directory)
    assert json.loads(as_json.stdout)["trace_id"] == CALLER_TRACE


async def _whole_trace(client: httpx.AsyncClient, run_id: str, steps: set[str],
                       timeout: float = 10.0) -> dict[str, Any]:
    """The run's trace once every step's span is in it: the processes export their spans in
    batches, a moment after each delivery ends (the last one may end after the run has)."""
    deadline = time.monotonic() + timeout
    while True:
        traced = await client.get(f"/runs/{run_id}/trace")
        assert traced.status_code == 200, traced.text
        body: dict[str, Any] = traced.json()
        found = {s["attributes"].get("ackloop.step") for s in body["spans"]
                 if s["name"] in STEP_SPANS}
        if found >= steps or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.1)


async def test_a_run_without_a_caller_trace_gets_one_derived_from_its_id(
    api: httpx.AsyncClient, api_stack: RunningStack,  # noqa: F811
) -> None:
    created = await api.post("/runs", json={"text": "hello"}, headers={"traceparent": "junk"})
    run_id = created.json()["run_id"]
    derived = tracing.run_trace_id(run_id)
    assert created.headers["traceparent"] == (
        f"00-{derived}-{tracing.run_root_span_id(run_id)}-01")
    assert (await api.get(f"/runs/{run_id}")).json()["trace_id"] == derived
    missing = await api.get("/runs/run-00000000000000000000000000000000/trace")
    assert missing.status_code == 404


async def test_a_run_sharing_a_trace_id_is_not_in_another_runs_trace(
    api: httpx.AsyncClient, api_stack: RunningStack,  # noqa: F811
) -> None:
    """S4: a run's trace was every span with its trace id, which a caller chooses (a
    ``traceparent`` naming another run's trace, derivable from its id, showed that run's spans:
    agent, tools, timings, tokens). A run's trace is now found by the run: two runs started in
    one trace each show only their own spans, in the API and in ``ackloop runs trace``."""
    shared = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ids = []
    for text in ("What is 2+2?", "hello"):
        created = await api.post("/runs", json={"text": text}, headers={"traceparent": shared})
        assert created.status_code == 202, created.text
        ids.append(created.json()["run_id"])
    for run_id in ids:
        await api_stack.wait_run(run_id)
    for run_id, other in (tuple(ids), tuple(ids[::-1])):
        steps = {s.key for s in await api_stack.store().steps.list_steps(run_id)}
        traced = await _whole_trace(api, run_id, steps)
        assert traced["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
        assert traced["spans"] and other not in json.dumps(traced)
        assert {s["attributes"].get("ackloop.run_id") for s in traced["spans"]} <= {run_id, None}
        cli = await _runs_trace(run_id, "--json", "--directory", api_stack.state.directory)
        assert cli.returncode == 0, cli.stderr
        assert json.loads(cli.stdout)["spans"] and other not in cli.stdout  # the CLI too
