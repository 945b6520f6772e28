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
import random
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from ackloop_dev.bench.fan_out_agents import LEAF, WIDTHS
from ackloop_dev.devstack import emulators, ports
from ackloop_dev.devstack.stack import LocalStack, StackOptions

AGENTS = "ackloop_dev.bench.fan_out_agents:agents"
_TERMINAL = {"completed", "failed", "cancelled"}


def _stack(directory: Path) -> LocalStack:
    for _ in range(20):
        options = StackOptions(
            directory=directory, project_id="ackloop-fan-out",
            pubsub_port=emulators.free_port(), firestore_port=emulators.free_port(),
            base_port=random.randrange(21000, 29000, 20), sandbox_apis=False, agents=AGENTS)
        stack = LocalStack(options)
        if not ports.taken(stack.planned_ports()):
            return stack
    raise RuntimeError("no free block of ports for the stack")


def _run(api: str, agent: str, text: str, deadline: float) -> dict[str, Any]:
    with httpx.Client(base_url=api, timeout=30.0) as http:
        created = http.post("/runs", json={"text": text, "agent": agent})
        created.raise_for_status()
        run_id = created.json()["run_id"]
        while time.monotonic() < deadline:
            view: dict[str, Any] = http.get(f"/runs/{run_id}").json()
            if view.get("status") in _TERMINAL:
                return view
            time.sleep(0.1)
    raise TimeoutError(f"run {run_id} did not end in time")


def _timed(api: str, asks: list[tuple[str, str]]) -> tuple[float, list[dict[str, Any]]]:
    started = time.monotonic()
    deadline = started + 600.0
    with ThreadPoolExecutor(max_workers=max(1, len(asks))) as pool:
        views = list(pool.map(lambda a: _run(api, a[0], a[1], deadline), asks))
    return time.monotonic() - started, views


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default=",".join(str(n) for n in WIDTHS))
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    widths = [int(n) for n in args.widths.split(",")]
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="ackloop-fan-out-"))
    stack = _stack(directory)
    state = stack.up(log=lambda line: print(line, file=sys.stderr))
    rows = []
    try:
        for n in widths:
            tree, (parent,) = _timed(state.api_url, [(f"fan-out-{n}", f"tree of {n}")])
            alone, leaves = _timed(state.api_url, [(LEAF, f"leaf {i} of {n}")
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
