"""A parent asking N sub-agents at once, against N independent runs at the same concurrency.

``python -m ackloop_dev.bench.fan_out [--widths 2,10,30,60] [--workdir DIR]``

A local stack (emulators, every ``ackloop run`` function, the push delivery at production's
timing) on the scripted model (:mod:`ackloop_dev.bench.fan_out_agents`). For each width N it
asks ``fan-out-N`` once (one turn of N child runs, each one instant model step, then the
parent's answer) and, apart, N runs of the leaf agent at once, and prints how long each took
from the first request to the last run's end, and their ratio. Every child's end is committed
on its parent's run document today, so the parent's time grows with N past what the same
number of independent runs takes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ackloop_dev.bench.fan_out_agents import LEAF, WIDTHS
from ackloop_dev.bench.stack_runs import asked_at_once, free_stack

AGENTS = "ackloop_dev.bench.fan_out_agents:agents"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default=",".join(str(n) for n in WIDTHS))
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    widths = [int(n) for n in args.widths.split(",")]
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
          f"{'ratio':>6} {'parent model calls':>19} ok")
    for n, tree, alone, ok, calls in rows:
        print(f"{n:>8} {tree:>19.2f} {alone:>18.2f} {tree / alone:>6.2f} {calls!s:>19} {ok}")
    return 0 if all(r[3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
