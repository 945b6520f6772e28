"""Does one tenant's burst move the others' waits? Measured on the in-process engine with a
manual clock: what the model quota's line does, not what a machine does.

``python -m ackloop_dev.bench.quota_fairness [--rpm 60] [--runs 20] [--calls 3] [--burst 10]
[--spread 60] [--json F]``

Four tenants (``a``, ``b``, ``c``, ``d``) each ask ``--runs`` runs of ``--calls`` model calls,
spread over ``--spread`` seconds, under a quota of ``--rpm`` requests a minute; then the same
again with tenant ``a`` asking ``--burst`` times as many. It prints each tenant's run times
(ask to end, on the engine's clock: all of it waiting for places) p50 and p95 in both, and how
much ``a``'s burst moved the others' p95. No figure is asserted.
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
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet
from ackloop_dev.bench.printed import printed
from ackloop_dev.bench.quota_cost import _play, look_up

TENANTS = ("a", "b", "c", "d")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1) if ordered else 0.0


async def measure(rpm: int, runs: dict[str, int], calls: int, spread: float
                  ) -> dict[str, dict[str, float]]:
    """Each tenant's run times (p50, p95) when each asks ``runs[tenant]`` runs."""
    publisher = MemoryPublisher()
    clock = ManualClock()
    deps = Deps(settings=Settings(model_quotas=[ModelQuota(model="*", rpm=rpm)]),
                store=AgentStore(MemoryDocumentDB()), publisher=publisher,
                model=ScriptedModel(_play(calls)),
                agents=AgentRegistry([Agent("solo", "Work.", ToolSet([look_up]))]),
                clock=clock, owner="bench", waker=MemoryWaker())
    loop = InProcessLoop(deps, publisher)
    asks = sorted((i * spread / n, tenant, i) for tenant, n in runs.items() for i in range(n))
    asked: dict[str, tuple[str, float]] = {}
    began = clock.now()
    for offset, tenant, i in asks:
        clock.advance(max(0.0, began + offset - clock.now()))
        request = f"{tenant}-{i}"
        await loop.submit(QueryMessage(request_id=request, text="go", agent="solo",
                                       options=RunOptions(tenant=tenant)))
        asked[run_id_for_request(request)] = (tenant, clock.now())
        await loop.run_until_idle(max_deliveries=100_000)
    await loop.run_until_idle(max_deliveries=1_000_000, wake=True)
    took: dict[str, list[float]] = {t: [] for t in runs}
    for run_id, (tenant, at) in asked.items():
        run = await deps.store.runs.get_run(run_id)
        assert run is not None and run.finished_at is not None, run
        took[tenant].append(run.finished_at - at)
    return {t: {"runs": len(s), "seconds_p50": percentile(s, 0.5),
                "seconds_p95": percentile(s, 0.95)} for t, s in took.items()}


def moved(even: dict[str, dict[str, float]], burst: dict[str, dict[str, float]]
          ) -> dict[str, float | None]:
    """How much the burst moved each other tenant's p95, as a ratio (1.0: not at all)."""
    return {t: (round(burst[t]["seconds_p95"] / even[t]["seconds_p95"], 3)
                if even[t]["seconds_p95"] else None)
            for t in even if t != "a"}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    even = {t: args.runs for t in TENANTS}
    found_even = await measure(args.rpm, even, args.calls, args.spread)
    found_burst = await measure(args.rpm, even | {"a": args.runs * args.burst}, args.calls,
                                args.spread)
    return {"workload": {"rpm": args.rpm, "runs_per_tenant": args.runs,
                         "model_calls_per_run": args.calls, "burst": args.burst,
                         "spread_s": args.spread},
            "even": found_even, "a_bursts": found_burst,
            "others_p95_moved": moved(found_even, found_burst)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=int, default=60)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--burst", type=int, default=10)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    found = asyncio.run(run(args))
    return printed(found, args.json)


if __name__ == "__main__":
    sys.exit(main())
