"""S4 in process: a caller's trace is a parent link, not an identity. Two runs started in one
caller trace (one ``traceparent``) share its trace id; ``GET /runs/{id}/trace`` of one finds
its spans by the run, so the other run's spans (its id, steps and timings) are not in it. The
emulator stack's test (tests/tracing/test_stack_trace.py) shows the same on real processes."""
from __future__ import annotations

import json
from pathlib import Path

import httpx

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from ackloop.telemetry import tracing
from tests.engine.fakes import CountingToolbox, make_loop

SHARED_TRACE = "0af7651916cd43dd8448eb211c80319c"
TRACEPARENT = f"00-{SHARED_TRACE}-b7ad6b7169203331-01"


async def test_a_run_sharing_a_trace_id_is_not_in_another_runs_trace(tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    traces.mkdir()
    settings = Settings(api_auth="none", trace_dir=str(traces), trace_export="file",
                        lease_seconds=10.0)
    loop = make_loop(ScriptedModel.from_turns([text_turn("a"), text_turn("b")]),
                     CountingToolbox(), settings=settings)

    async def deps() -> Deps:
        return loop.deps

    app = create_app(settings, deps=deps)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as api:
        ids = []
        for text in ("What is 2+2?", "hello"):
            created = await api.post("/runs", json={"text": text},
                                     headers={"traceparent": TRACEPARENT})
            assert created.status_code == 202, created.text
            ids.append(created.json()["run_id"])
        for run_id in ids:  # both runs in the caller's one trace, as a traceparent makes them
            run = await loop.deps.store.get_run(run_id)
            assert run is not None and run.trace_id == SHARED_TRACE
        # The trace file: a caller span; each run's root under it; spans naming each run.
        lines = [{"trace_id": SHARED_TRACE, "span_id": "caller", "parent_span_id": None,
                  "name": "caller", "start": 0, "end": 9, "attributes": {}}]
        for n, run_id in enumerate(ids):
            root = tracing.run_root_span_id(run_id)
            lines.append({"trace_id": SHARED_TRACE, "span_id": root, "parent_span_id": "caller",
                          "name": "ackloop.run", "start": 1 + n, "end": 8,
                          "attributes": {"ackloop.run_id": run_id}})
            lines.append({"trace_id": SHARED_TRACE, "span_id": f"step-{n}", "parent_span_id": root,
                          "name": "model_step", "start": 2 + n, "end": 7,
                          "attributes": {"ackloop.run_id": run_id, "ackloop.step": "0000-model"}})
        (traces / "api-1.jsonl").write_text("".join(json.dumps(s) + "\n" for s in lines))
        for run_id, other in (tuple(ids), tuple(ids[::-1])):
            got = await api.get(f"/runs/{run_id}/trace")
            assert got.status_code == 200, got.text
            traced = got.json()
            assert traced["trace_id"] == SHARED_TRACE
            assert traced["spans"] and other not in json.dumps(traced), (run_id, other)
            assert {s["attributes"].get("ackloop.run_id") for s in traced["spans"]} <= {
                run_id, None}
