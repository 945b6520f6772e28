"""A parent asking N sub-agents at once, against N independent runs at the same concurrency.

``python -m ackloop_dev.bench.fan_out [--widths 2,10,30,60] [--workdir DIR] [--writes-only]``

A local stack (emulators, every ``ackloop run`` function, the push delivery at production's
timing) on the scripted model (:mod:`ackloop_dev.bench.fan_out_agents`). For each width N it
asks ``fan-out-N`` once (one turn of N child runs, each one instant model step, then the
parent's answer) and, apart, N runs of the leaf agent at once, and prints how long each took
from the first request to the last run's end, and their ratio.

It also asks ``fan-out-N`` on the in-memory engine and counts the writes on the parent's run
document (``MemoryDocumentDB.written``): in all, and per child beyond a run without children
(a child's end and its call's wait write only the call's step: 0 per child). Production
Firestore sustains about one write a second on one document, so that figure is what a wide
fan-out would queue on. ``--writes-only`` counts them without the stack (a second).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from ackloop.config.settings import Settings
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.testing.agent_tester import AgentTester
from ackloop_dev.bench.fan_out_agents import LEAF, WIDTHS, agents
from ackloop_dev.bench.stack_runs import asked_at_once, free_stack

AGENTS = "ackloop_dev.bench.fan_out_agents:agents"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default=",".join(str(n) for n in WIDTHS))
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--writes-only", action="store_true",
                        help="only count the writes on the parent's run document, in memory")
    args = parser.parse_args(argv)
    widths = [int(n) for n in args.widths.split(",")]
    writes = {n: asyncio.run(parent_run_writes(n)) for n in widths}
    if args.writes_only:
        print(f"{'children':>8} {'parent run doc writes':>22} {'per child':>10}")
        for n in widths:
            print(f"{n:>8} {writes[n][0]:>22} {writes[n][1]:>10.2f}")
        return 0
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="ackloop-fan-out-"))
    stack = free_stack(directory, "ackloop-fan-out", AGENTS)
    state = stack.up(log=lambda line: print(line, file=sys.stderr))
    rows = []
    try:
        for n in widths:
            tree, (parent,) = asked_at_once(state.api_url, [(f"fan-out-{n}", f"tree of {n}")])
            alone, leaves = asked_at_once(state.api_url, [(LEAF, f"leaf {i} of {n}")
                                                   for i in range(n)])
            ok = parent.get("status") == "completed" and all(
                v.get("status") == "completed" for v in leaves)
            rows.append((n, tree, alone, ok, (parent.get("usage") or {}).get("model_calls")))
    finally:
        stack.down()
    print(f"{'children':>8} {'parent answered, s':>19} {'N runs at once, s':>18} "
          f"{'ratio':>6} {'parent model calls':>19} {'run doc writes/child':>21} ok")
    for n, tree, alone, ok, calls in rows:
        print(f"{n:>8} {tree:>19.2f} {alone:>18.2f} {tree / alone:>6.2f} {calls!s:>19} "
              f"{writes[n][1]:>21.2f} {ok}")
    return 0 if all(r[3] for r in rows) else 1


async def parent_run_writes(n: int) -> tuple[int, float]:
    """On the in-memory engine, ``fan-out-n`` asked once: the writes on its run document, and
    per child those beyond what a run of the leaf agent (no children) writes on its own."""

    async def written(agent: str) -> int:
        tester = AgentTester(agents(), settings=Settings())
        result = await tester.ask("count", agent=agent, max_deliveries=100 * (n + 2))
        store = tester.deps.store
        memory = store.db.inner  # type: ignore[attr-defined]
        assert isinstance(memory, MemoryDocumentDB)
        return memory.written[store.run_path(result.run_id)]

    total, alone = await written(f"fan-out-{n}"), await written(LEAF)
    return total, (total - alone) / n


if __name__ == "__main__":
    sys.exit(main())
