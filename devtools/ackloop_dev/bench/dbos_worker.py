"""The DBOS peer's process: the reference workload as a DBOS Transact workflow, and its phases.

``python -m ackloop_dev.bench.dbos_worker --database-url URL --postgres-pid PID --spawned-at T
--config JSON`` (started by :mod:`ackloop_dev.bench.dbos_side`). DBOS is a library: the
application process runs the workflows it starts, checkpointing each step in PostgreSQL, so this
one process is the client and the worker. A run is model -> tool -> model -> tool -> model, each
an instant ``@DBOS.step`` (the scripted model decides from the turn alone), recording when it
ran. The phases (a first run timed from the process's spawn, warm-up, sequential, each
concurrency level) are measured here, CPU of this process and of the PostgreSQL server tree
included, and printed as one JSON line on stdout.

Set up as DBOS's configuration reference describes (docs.dbos.dev/python/reference/configuration):
PostgreSQL as the system database; ``max_executor_threads`` raised to 512, because DBOS runs
each started workflow on a thread of its executor and the bench keeps up to 200 in flight; the
system database's connection pool left at DBOS's default (20 connections, no overflow), which
the docs do not advise changing; no queue (each run is started with ``DBOS.start_workflow``,
nothing to rate-limit).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from typing import Any

import psutil
from dbos import DBOS

from ackloop_dev.bench.procstats import MachineCpu, own_cpu_seconds, tree_cpu_seconds

REFERENCE_CALLS = 2

Timing = list[float]
"""[start, end] of one step, Unix seconds."""


@DBOS.step()
def model_call(turn: int, calls: int) -> Timing:
    """The instant scripted model: a tool call until ``calls`` were made, then the answer."""
    start = time.time()
    _decision = "tool" if turn < calls else "answer"
    return [start, time.time()]


@DBOS.step()
def tool_call(turn: int) -> Timing:
    """The instant tool."""
    start = time.time()
    _value = {"key": "k", "value": "42", "turn": turn}
    return [start, time.time()]


@DBOS.workflow()
def reference_run(calls: int) -> list[Timing]:
    """model -> tool -> ... -> model, ``calls`` tool calls; each step's timing, in order."""
    timings = []
    for turn in range(calls + 1):
        timings.append(model_call(turn, calls))
        if turn < calls:
            timings.append(tool_call(turn))
    return timings


def step_gaps(timings: list[Timing]) -> list[float]:
    """Seconds from each step's end to the next one's start (the engine's overhead)."""
    return [b[0] - a[1] for a, b in pairwise(timings)]


def _one() -> dict[str, Any]:
    started = time.time()
    try:
        handle = DBOS.start_workflow(reference_run, REFERENCE_CALLS)
        timings = handle.get_result()
    except Exception as exc:  # a failed run is a measurement, not a crash
        return {"ok": False, "seconds": time.time() - started, "error": repr(exc), "gaps": []}
    return {"ok": True, "seconds": time.time() - started, "gaps": step_gaps(timings),
            "first_step": timings[0][0] if timings else None}


def _phase(runs: int, concurrency: int, postgres_pid: int) -> dict[str, Any]:
    own, pg = own_cpu_seconds(), tree_cpu_seconds(postgres_pid)
    machine = MachineCpu.now().busy_s
    t0 = time.perf_counter()
    if concurrency <= 1:
        results = [_one() for _ in range(runs)]
    else:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            results = list(pool.map(lambda _: _one(), range(runs)))
    wall = time.perf_counter() - t0
    cpu = {"worker": own_cpu_seconds() - own, "postgres": tree_cpu_seconds(postgres_pid) - pg}
    cpu["total"] = cpu["worker"] + cpu["postgres"]
    cpu["other"] = max(0.0, MachineCpu.now().busy_s - machine - cpu["total"])
    return {"runs": runs, "concurrency": concurrency, "wall_s": wall, "results": results,
            "cpu_s": cpu}


def checkpointed_steps(database_url: str) -> int:
    """How many step outputs DBOS wrote to PostgreSQL (its ``operation_outputs`` table)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(
                sqlalchemy.text("SELECT count(*) FROM dbos.operation_outputs")).scalar_one())
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--postgres-pid", type=int, required=True)
    parser.add_argument("--spawned-at", type=float, required=True)
    parser.add_argument("--config", required=True, help="JSON: warmup_runs, sequential_runs, "
                        "concurrency [[concurrency, runs], ...]")
    args = parser.parse_args(argv)
    config = json.loads(args.config)
    DBOS(config={"name": f"ackloop-bench-{uuid.uuid4().hex[:6]}",
                 "system_database_url": args.database_url,
                 "max_executor_threads": 512, "application_version": "bench"})
    DBOS.launch()
    try:
        first = _one()
        launched = {"cold_start_s": (first.get("first_step") or time.time()) - args.spawned_at,
                    "first_run_ok": first["ok"]}
        _phase(config["warmup_runs"], 1, args.postgres_pid)
        out: dict[str, Any] = {**launched,
                               "sequential": _phase(config["sequential_runs"], 1,
                                                    args.postgres_pid),
                               "concurrent": [_phase(runs, c, args.postgres_pid)
                                              for c, runs in config["concurrency"]],
                               "peak_rss_mb": round(psutil.Process().memory_info().rss / 2**20,
                                                    1)}
        out["checkpointed_steps"] = checkpointed_steps(args.database_url)
    finally:
        DBOS.destroy()
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
