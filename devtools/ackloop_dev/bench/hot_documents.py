"""Which documents the limiters write, and how often, at a full quota: Firestore's guidance is
about one write a second to any one document.

``python -m ackloop_dev.bench.hot_documents [--rpm 600] [--runs 600] [--calls 3]
[--spread 60] [--tenants 20] [--concurrency 5] [--usd 1000] [--json F]``

Runs ``--runs`` runs of ``--calls`` model calls (a tool call between two), asked evenly over
``--spread`` seconds by ``--tenants`` tenants, on the in-process engine with a manual clock (a
call takes no time: the model's quota, not a machine, sets the pace) under a quota of ``--rpm``
requests and 10,000 times as many input tokens a minute, at most ``--concurrency`` model steps
at once per tenant, and a daily budget of ``--usd`` per tenant (0 turns either off). Every
write is noted with the clock's time and its document. It prints the model calls made, the
minutes they took and, for each kind of document (the quota's shards, the concurrency slots,
the budgets, the runs, the steps, ...), how many there were, the most writes any one of them
took in one second, and the most any one took a second over its busiest minute. No figure
is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ackloop.agents.agent import Agent, AgentRegistry
from ackloop.bus.memory import MemoryPublisher
from ackloop.bus.wakes import MemoryWaker
from ackloop.config.concurrency import ConcurrencyLimit
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.config.spend import SpendLimit
from ackloop.docdb.base import Version, Write
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.clock import ManualClock
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop.store import AgentStore
from ackloop.testing.inprocess import InProcessLoop
from ackloop.tools import ToolSet
from ackloop_dev.bench.printed import printed
from ackloop_dev.bench.quota_cost import _play, look_up

MODEL = "gemini-3-flash-preview"
"""A model the price table lists, so that the budgets count what each call costs."""


class WriteTimes(MemoryDocumentDB):
    """The in-memory database, noting when each document was written (the clock's time)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__()
        self.clock = clock
        self.times: dict[str, list[float]] = defaultdict(list)

    def _apply(self, writes: Sequence[Write]) -> list[Version]:
        versions = super()._apply(writes)
        for w in writes:
            self.times[w.path].append(self.clock.now())
        return versions


def busiest(times: list[float], span: float) -> int:
    """The most of ``times`` (sorted) within any ``span`` seconds."""
    most, start = 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= span:
            start += 1
        most = max(most, end - start + 1)
    return most


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    clock = ManualClock()
    db = WriteTimes(clock)
    publisher = MemoryPublisher()
    settings: dict[str, Any] = {"model": MODEL, "model_quotas": [
        ModelQuota(model="*", rpm=args.rpm, tpm=args.rpm * 10_000)]}
    if args.concurrency:
        settings["concurrency_limits"] = [ConcurrencyLimit(steps="model", key="tenant",
                                                           limit=args.concurrency)]
    if args.usd:
        settings["spend_limits"] = [SpendLimit(key="tenant", period="day", usd=args.usd)]
    model = ScriptedModel(_play(args.calls))
    deps = Deps(settings=Settings(**settings), store=AgentStore(db), publisher=publisher,
                model=model, agents=AgentRegistry([Agent("solo", "Work.", ToolSet([look_up]))]),
                clock=clock, owner="bench", waker=MemoryWaker())
    loop = InProcessLoop(deps, publisher)
    began = clock.now()
    for i in range(args.runs):
        clock.advance(max(0.0, began + i * args.spread / args.runs - clock.now()))
        await loop.submit(QueryMessage(request_id=f"q{i}", text="go", agent="solo",
                                       options=RunOptions(tenant=f"t{i % args.tenants}")))
        await loop.run_until_idle(max_deliveries=100_000)
    await loop.run_until_idle(max_deliveries=10_000_000, wake=True)
    kinds: dict[str, dict[str, Any]] = {}
    for path, times in db.times.items():
        kind = _kind(path)
        times.sort()
        found = kinds.setdefault(kind, {"documents": 0, "writes": 0, "most_in_a_second": 0,
                                        "most_a_second_over_a_minute": 0.0, "hottest": ""})
        found["documents"] += 1
        found["writes"] += len(times)
        second = busiest(times, 1.0)
        if second > found["most_in_a_second"]:
            found["most_in_a_second"], found["hottest"] = second, path
        found["most_a_second_over_a_minute"] = max(found["most_a_second_over_a_minute"],
                                                   round(busiest(times, 60.0) / 60.0, 2))
    return {"workload": {"rpm": args.rpm, "runs": args.runs, "calls": args.calls,
                         "spread_s": args.spread, "tenants": args.tenants,
                         "concurrency_per_tenant": args.concurrency,
                         "usd_per_tenant_a_day": args.usd},
            "model_calls": model.calls,
            "minutes": round((clock.now() - began) / 60.0, 2),
            "documents": dict(sorted(kinds.items(),
                                     key=lambda kv: -kv[1]["most_in_a_second"]))}


def _kind(path: str) -> str:
    """A document's kind: its collection (the quota's shards, ``slots``, ``spend``, ...)."""
    parts = path.split("/")
    return parts[-2] if len(parts) >= 2 else parts[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rpm", type=int, default=600)
    parser.add_argument("--runs", type=int, default=600)
    parser.add_argument("--calls", type=int, default=3)
    parser.add_argument("--spread", type=float, default=60.0)
    parser.add_argument("--tenants", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=5)
    parser.add_argument("--usd", type=float, default=1000.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    found = asyncio.run(measure(args))
    return printed(found, args.json)


if __name__ == "__main__":
    sys.exit(main())
