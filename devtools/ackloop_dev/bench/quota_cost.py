"""What a model quota adds to each model step, side by side in one run.

``python -m ackloop_dev.bench.quota_cost [--runs 50] [--calls 4] [--json F]``

Runs the same workload (``--runs`` runs, each ``--calls`` model calls and a tool call between
two) on the in-process engine over the counting document database, three times: without a
quota, under a quota of requests with room to spare (no step waits), and under a quota of
requests and input tokens with room to spare. It prints, per model step, the round trips,
documents read and written and bytes read of each, and what the quota added: what a gated
step pays when it does not wait. No figure is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import calls_turn, text_turn
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet, tool
from ackloop_dev.bench.printed import printed

QUOTAS: dict[str, list[ModelQuota]] = {
    "no quota": [],
    "rpm": [ModelQuota(model="*", rpm=100_000)],
    "rpm+tpm": [ModelQuota(model="*", rpm=100_000, tpm=100_000_000)],
}


@tool
def look_up(n: int) -> str:
    """Look something up."""
    return f"found {n}"


def _play(calls: int) -> Any:
    def play(request: ModelRequest) -> ModelTurn:
        made = sum(1 for c in request.contents for p in c.get("parts", [])
                   if "function_response" in p or "functionResponse" in p)
        if made + 1 < calls:
            return calls_turn([("look_up", {"n": made})], request=request)
        return text_turn("done", request=request)
    return play


async def measure(quotas: list[ModelQuota], runs: int, calls: int) -> dict[str, float]:
    """The workload under ``quotas``: what it cost per model step."""
    db = CountingDocumentDB(MemoryDocumentDB())
    publisher = MemoryPublisher()
    model = ScriptedModel(_play(calls))
    deps = Deps(settings=Settings(model_quotas=quotas), store=AgentStore(db),
                publisher=publisher, model=model,
                agents=AgentRegistry([Agent("solo", "Work.", ToolSet([look_up]))]),
                clock=ManualClock(), owner="bench", waker=MemoryWaker())
    loop = InProcessLoop(deps, publisher)
    for i in range(runs):
        await loop.submit(QueryMessage(request_id=f"q{i}", text="go", agent="solo"))
    await loop.run_until_idle(max_deliveries=100 * runs * calls, wake=True)
    steps = model.calls
    counted = db.counters
    return {"model_steps": steps,
            "round_trips": round(counted.round_trips / steps, 3),
            "docs_read": round(counted.docs_read / steps, 3),
            "docs_written": round(counted.docs_written / steps, 3),
            "bytes_read": round(counted.bytes_read / steps, 1)}


def added(gated: dict[str, float], ungated: dict[str, float]) -> dict[str, float]:
    """What a gated step pays on top of an ungated one, per model step."""
    return {k: round(gated[k] - ungated[k], 3) for k in gated if k != "model_steps"}


async def run(runs: int, calls: int) -> dict[str, Any]:
    found = {name: await measure(quotas, runs, calls) for name, quotas in QUOTAS.items()}
    base = found["no quota"]
    return {"workload": {"runs": runs, "model_calls_per_run": calls},
            "per_model_step": found,
            "added_per_gated_step": {name: added(found[name], base)
                                     for name in QUOTAS if name != "no quota"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    found = asyncio.run(run(args.runs, max(1, args.calls)))
    return printed(found, args.json)


if __name__ == "__main__":
    sys.exit(main())
