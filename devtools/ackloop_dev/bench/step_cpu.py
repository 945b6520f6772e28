"""A model step's CPU by turn, timed per delivery: the engine in this process on the Firestore
emulator, one ``time.process_time`` around each model step's handler.

``python -m ackloop_dev.bench.step_cpu [--runs N] [--steps 101] [--turns 0,25,50] [--window 5]
[--against CHECKOUT] [--json FILE]``

:mod:`ackloop_dev.bench.step_profile` reads a function process's CPU from ``/proc`` (10 ms
clock ticks) and averages it over a few steps, with each request's fixed cost in the function
process (the HTTP server, the push decoding) in it. This one times the handler alone, each
delivery exactly: the runtime's dependencies as a deployed model step builds them
(:func:`ackloop.hosting.runtime.build_deps`: the Firestore adapter and its decode cache at the
settings' defaults), the scripted model of the step profile's agent
(:mod:`ackloop_dev.bench.step_agents`), an in-memory publisher (publishing is not what grows
with the run). The scripted model's decision (its script reading the history to choose the
turn's call: Gemini's own work, done on Google's side in production) is timed apart and left
out of the step's figure; its validation of the request (what google-genai's types cost the
client) stays in. ``--with-script`` prints the figures with the decision counted too.

A warm-up run first, then ``--runs`` runs of ``--steps`` steps; a turn's figure is the median
over the runs of the mean over ``--window`` model steps from it (ending at it for the run's
last).

With the shipped defaults a long conversation's model step claims before its call
(:mod:`ackloop.engine.claims`: past about 1,800 prompt tokens of the default model a duplicate
would cost more than the claim's write), so the late turns carry one commit the early ones do
not; ``ACKLOOP_STEP_CLAIMS=always`` compares every turn claiming.

Needs ``FIRESTORE_EMULATOR_HOST`` and ``PUBSUB_EMULATOR_HOST`` (the runtime
builds its publisher, though nothing is published to it).

``--against CHECKOUT`` measures another checkout of the project too (its ``shared/``, with
this benchmark), in turn with this one, and prints both side by side: each side runs in a
process of its own, so neither warms the other's caches.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ackloop_dev.bench.step_profile import parse_ints, tool_calls_for

PROJECT = "ackloop-step-cpu"


def turn_means(cpu_by_turn: Sequence[float], turns: Sequence[int], window: int
               ) -> dict[int, float]:
    """The mean CPU of ``window`` model steps from each turn (shifted back at the run's end),
    for the turns the run has."""
    found: dict[int, float] = {}
    for turn in turns:
        if turn >= len(cpu_by_turn):
            continue
        first = max(0, min(turn, len(cpu_by_turn) - window))
        chunk = cpu_by_turn[first:first + window]
        found[turn] = sum(chunk) / len(chunk)
    return found


def ratios(means: dict[int, float]) -> dict[int, float]:
    """Each turn's figure over turn 0's."""
    base = means.get(0)
    return {t: round(v / base, 2) for t, v in means.items()} if base else {}


async def _measure(steps: int, runs: int) -> tuple[list[list[float]], list[list[float]]]:
    """CPU ms of each model step's delivery, by turn, for each run after a warm-up one: the
    step's own (without the scripted model's decision), and the decision's."""
    from ackloop.bus.memory import MemoryPublisher
    from ackloop.config.settings import Settings
    from ackloop.domain.keys import run_id_for_request
    from ackloop.domain.wire import QueryMessage, RunOptions
    from ackloop.hosting.runtime import build_deps
    from ackloop.testing.inprocess import InProcessLoop
    from ackloop_dev.bench.step_agents import AGENT

    tag = f"c{uuid.uuid4().hex[:8]}"
    os.environ.update({"ACKLOOP_PROJECT_ID": PROJECT, "GOOGLE_CLOUD_PROJECT": PROJECT,
                       "ACKLOOP_COLLECTION_PREFIX": f"{tag}_",
                       "ACKLOOP_MODEL_PROVIDER": "scripted", "ACKLOOP_LOG_LEVEL": "WARNING",
                       "ACKLOOP_AGENTS": "ackloop_dev.bench.step_agents:agents"})
    publisher = MemoryPublisher()
    deps = replace(await build_deps(Settings()), publisher=publisher)
    # As a deployed process does once started (ackloop.hosting.gcstart): what start-up made is
    # frozen
    # out of the cyclic collector, or its first full collections (near 0.1 s each) land on
    # whichever steps happen to run then.
    gc.collect()
    gc.freeze()
    timed: dict[int, float] = {}
    decided: dict[int, float] = {}
    in_script = [0.0]
    script = deps.model.script  # type: ignore[attr-defined]  # the scripted model's

    def timed_script(request: Any) -> Any:
        began = time.process_time()
        try:
            return script(request)
        finally:
            in_script[0] += time.process_time() - began

    deps.model.script = timed_script  # type: ignore[attr-defined]

    class Timed(InProcessLoop):
        async def deliver(self, kind: Any, message: Any) -> Any:
            if kind != "model":
                return await super().deliver(kind, message)
            began, scripted = time.process_time(), in_script[0]
            outcome = await super().deliver(kind, message)
            turn = int(json.loads(message.data)["turn"])
            decision = (in_script[0] - scripted) * 1000
            total = (time.process_time() - began) * 1000
            timed[turn] = timed.get(turn, 0.0) + total - decision
            decided[turn] = decided.get(turn, 0.0) + decision
            return outcome

    loop = Timed(deps, publisher)
    found: list[list[float]] = []
    decisions: list[list[float]] = []
    for i in range(runs + 1):
        calls = tool_calls_for(steps if i else 5)
        request_id = f"{tag}-{i}"
        timed.clear()
        decided.clear()
        await loop.submit(QueryMessage(
            request_id=request_id, text=f"step cpu, calls={calls}", agent=AGENT,
            options=RunOptions(max_steps=calls + 1, max_tool_calls=calls)))
        await loop.run_until_idle(max_deliveries=4 * steps + 20)
        run = await deps.store.runs.get_run(run_id_for_request(request_id))
        if run is None or run.status.value != "completed":
            raise RuntimeError(f"run {request_id} did not complete: {run}")
        if i:
            found.append([timed[t] for t in sorted(timed)])
            decisions.append([decided[t] for t in sorted(decided)])
    return found, decisions


def summary(runs: list[list[float]], turns: Sequence[int], window: int) -> dict[str, Any]:
    """Per turn: the median over the runs of each run's windowed mean, and its ratio; and the
    least over the runs (on a shared machine, other processes only ever add to a step's CPU:
    the least is the steadiest figure of what the step itself costs)."""
    per_run = [turn_means(r, turns, window) for r in runs]
    common = [t for t in turns if all(t in m for m in per_run)]
    medians = {t: round(statistics.median(m[t] for m in per_run), 2) for t in common}
    least = {t: round(min(m[t] for m in per_run), 2) for t in common}
    return {"cpu_ms": medians, "ratio": ratios(medians),
            "cpu_ms_least": least, "ratio_least": ratios(least),
            "ratio_by_run": [ratios(m) for m in per_run],
            "cpu_ms_by_run": [{t: round(v, 2) for t, v in m.items()} for m in per_run]}


def _side(shared: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    """One side's figures, from a process of its own (``shared``: the checkout's package)."""
    env = dict(os.environ)
    if shared is not None:
        here = Path(__file__).resolve().parents[2]  # devtools/
        env["PYTHONPATH"] = os.pathsep.join([str(shared), str(here)])
    out = subprocess.run(
        [sys.executable, "-m", "ackloop_dev.bench.step_cpu", "--child", "--steps",
         str(args.steps), "--runs", str(args.runs)],
        env=env, check=True, capture_output=True, text=True)
    runs, decisions = json.loads(out.stdout)
    if args.with_script:
        runs = [[a + b for a, b in zip(r, d, strict=True)] for r, d in zip(runs, decisions,
                                                                            strict=True)]
    return summary(runs, parse_ints(args.turns), args.window)


def render(sides: dict[str, dict[str, Any]], turns: Sequence[int], window: int,
           with_script: bool = True) -> str:
    """One row per turn, one column pair (CPU ms, ratio) per side."""
    names = list(sides)
    lines = [f"model step CPU ms per delivery (mean of {window} steps from the turn, median "
             "over runs; ratio to turn 0)" + ("" if with_script else
                                              "; the scripted model's decision left out"),
             f"{'turn':>6}" + "".join(f"{name:>28}" for name in names)]
    for t in turns:
        cells = []
        for name in names:
            side = sides[name]
            cpu, ratio = side["cpu_ms"].get(t), side["ratio"].get(t)
            cells.append(f"{cpu:>20.2f} (x{ratio:.2f})" if cpu is not None else f"{'-':>28}")
        lines.append(f"{t:>6}" + "".join(cells))
    for name in names:
        side = sides[name]
        lines.append(f"{name}: least over runs " + ", ".join(
            f"{t}: {side['cpu_ms_least'][t]:.2f} ms (x{side['ratio_least'][t]:.2f})"
            for t in turns if t in side["cpu_ms_least"]))
    for name in names:
        lines.append(f"{name}: ratios by run " + "; ".join(
            ", ".join(f"{t}: x{r:g}" for t, r in by.items())
            for by in sides[name]["ratio_by_run"]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs measured (default 3)")
    parser.add_argument("--steps", type=int, default=101, help="steps per run (default 101)")
    parser.add_argument("--turns", default="0,25,50", help="model turns (default 0,25,50)")
    parser.add_argument("--window", type=int, default=5,
                        help="model steps a turn's CPU is averaged over (default 5)")
    parser.add_argument("--against", type=Path,
                        help="another checkout of the project, measured in turn with this one")
    parser.add_argument("--rounds", type=int, default=1,
                        help="times each side is measured, alternated (default 1)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--with-script", action="store_true",
                        help="count the scripted model's decision in the step's CPU too")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    tool_calls_for(args.steps)
    if args.child:
        print(json.dumps(asyncio.run(_measure(args.steps, args.runs))))
        return
    if not (os.environ.get("FIRESTORE_EMULATOR_HOST") and os.environ.get("PUBSUB_EMULATOR_HOST")):
        parser.error("set FIRESTORE_EMULATOR_HOST and PUBSUB_EMULATOR_HOST (the emulators)")
    turns = parse_ints(args.turns)
    sides: dict[str, dict[str, Any]] = {}
    for round_ in range(args.rounds):
        suffix = f" #{round_ + 1}" if args.rounds > 1 else ""
        if args.against is not None:
            sides[f"{args.against.name}{suffix}"] = _side(args.against / "shared", args)
        sides[f"this checkout{suffix}"] = _side(None, args)
    print(render(sides, turns, args.window, args.with_script))
    if args.json is not None:
        args.json.write_text(json.dumps(sides, indent=2))


if __name__ == "__main__":
    main()
