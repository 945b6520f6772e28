"""The ackloop side of ``ackloop bench``: the reference workload on the emulators.

Every run is model -> tool -> model -> tool -> model with the scripted instant model and the
instant ``bench_lookup`` tool (agent ``reference``), through real processes: the query is
published to the queries topic, each step is a push delivery to a function process
(``ackloop run``), and the answer is received from the answers topic. Measured:

* per-step engine overhead, from the step documents (see :mod:`ackloop_dev.bench.step_timing`),
  and its split at the next step's claim;
* run end-to-end, one run at a time, and throughput plus end-to-end with C concurrent runs;
* CPU seconds per run of every process of the side (functions, both emulators, client) and of
  the machine (to show contention), and the peak RSS of each function process tree;
* Firestore requests/documents and Pub/Sub publishes per step, counted by the functions;
* pushes by HTTP answer, counted by the push delivery: pushes (``deliveries``) and non-2xx
  answers (``redelivered``) per step and per run, and non-2xx answers per 1,000 steps
  (:mod:`ackloop_dev.bench.push_answers`); the phases the emulator pushes have neither;
* growth with conversation length (agent ``reference-long``);
* cold start of a function process (spawn -> first request served);
* the Firestore emulator's lock floor (:mod:`ackloop_dev.bench.contention`).
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.domain.records import StepRecord
from ackloop.domain.wire import RunOptions
from ackloop.store import AgentStore
from ackloop_dev.bench import ackloop_counts as counts
from ackloop_dev.bench import push_answers
from ackloop_dev.bench.ackloop_client import AnswerWatcher, RunDriver, RunResult, completed
from ackloop_dev.bench.ackloop_stack import STEP_FUNCTIONS, BenchStack
from ackloop_dev.bench.contention import measure_lock_floor
from ackloop_dev.bench.pricing import billed_per_run, cost_per_1000_runs
from ackloop_dev.bench.procstats import CpuMeter, tree_peak_rss_mib
from ackloop_dev.bench.push_floor import measure_delivery_floor
from ackloop_dev.bench.step_timing import call_seconds, load_steps, split_gaps, step_gaps
from ackloop_dev.bench.temporal_side import distribution_ms

STEPS_PER_REFERENCE_RUN = 5


@dataclass(frozen=True)
class Level:
    """``runs`` runs in total, at most ``concurrency`` in flight."""

    concurrency: int
    runs: int


@dataclass(frozen=True)
class AckloopBenchConfig:
    """What to measure on the ackloop side, and how much of it."""

    warmup: Level = Level(50, 150)
    """Runs before measuring: the emulators are JVMs that get faster as their JIT warms up."""
    warmup_runs: int = 5
    sequential_runs: int = 100
    concurrency: tuple[Level, ...] = (Level(50, 500), Level(200, 1000))
    growth_calls: tuple[int, ...] = (5, 25, 50)
    """Tool calls per run of the growth phase: 11, 51 and 101 steps."""
    growth_runs: int = 2
    cold_starts: int = 5
    """Restarts of each step function to time its cold start (the median is the figure)."""
    contention_transactions: int = 6
    emulator_push_runs: int = 30
    """Sequential runs delivered by the emulator's own push loop (its floor)."""
    emulator_push_level: Level | None = Level(50, 250)
    """A concurrent phase delivered by the emulator's own push loop."""
    probe_floors: bool = True
    """Measure the emulators' delivery and lock floors."""
    run_timeout_s: float = 120.0
    log_level: str = "INFO"

    @classmethod
    def quick(cls) -> AckloopBenchConfig:
        """Small enough to finish in about a minute."""
        return cls(
            warmup=Level(20, 40),
            warmup_runs=3,
            sequential_runs=20,
            concurrency=(Level(50, 100), Level(200, 200)),
            growth_runs=1,
            cold_starts=3,
            contention_transactions=3,
            emulator_push_runs=10,
            emulator_push_level=Level(50, 60),
            run_timeout_s=60.0,
        )


@dataclass
class _Side:
    stack: BenchStack
    driver: RunDriver
    store: AgentStore
    config: AckloopBenchConfig
    rss_during_load: dict[str, dict[str, float]] = field(default_factory=dict)


async def _phase(
    side: _Side, runner: Callable[[], Awaitable[list[RunResult]]], steps_per_run: int
) -> dict[str, Any]:
    """Run one phase and summarise it: latency, throughput, overhead, CPU, counted operations."""
    meter = CpuMeter(side.stack.cpu_roles())
    pushed_before = await asyncio.to_thread(_push_stats, side)
    before = await asyncio.to_thread(side.stack.counters)
    meter.start()
    t0 = time.perf_counter()
    results = await runner()
    wall = time.perf_counter() - t0
    cpu = meter.stop()
    pushed_after = await asyncio.to_thread(_push_stats, side)
    after = await asyncio.to_thread(side.stack.counters)
    done = completed(results)
    steps = await load_steps(side.store, [r.run_id for r in done])
    step_count = sum(len(s) for s in steps.values())
    delta = counts.difference(before, after)
    answered = (push_answers.between(pushed_before, pushed_after, step_count)
                if pushed_before is not None and pushed_after is not None else None)
    if answered is not None:
        delta["total"] |= {"deliveries": float(answered["pushes"]),
                           "redelivered": float(answered["non_2xx"])}
    per_run = max(len(done), 1)
    engine = [r.seconds - call_seconds(steps[r.run_id]) for r in done]
    function_cpu = sum(cpu[f] for f in STEP_FUNCTIONS)
    return {
        "runs": len(results),
        "completed": len(done),
        "failed": len(results) - len(done),
        "steps": step_count,
        "expected_steps": len(done) * steps_per_run,
        "wall_s": round(wall, 3),
        "runs_per_s": round(len(done) / wall, 2) if wall > 0 else 0.0,
        "e2e_ms": distribution_ms([r.seconds for r in done]),
        "engine_ms_per_run": distribution_ms(engine),
        "step_overhead_ms": distribution_ms([g for s in steps.values() for g in step_gaps(s)]),
        "step_overhead_split_ms": _split(steps),
        "cpu_s": cpu,
        "cpu_ms_per_run": {k: round(v * 1000 / per_run, 2) for k, v in cpu.items()},
        "function_cpu_ms_per_run": round(function_cpu * 1000 / per_run, 2),
        "counted": {fn: {k: round(v, 1) for k, v in row.items()} for fn, row in delta.items()},
        "per_step": counts.per_unit(delta["total"], step_count),
        "per_run": counts.per_unit(delta["total"], len(done)),
        "push_answers": answered,
        "errors": sorted({r.error for r in results if r.error})[:5],
    }


def _split(steps: dict[str, list[StepRecord]]) -> dict[str, dict[str, float]]:
    """The step overhead in two: to the next step's claim, and from its claim to its call."""
    parts = [p for s in steps.values() for p in split_gaps(s)]
    return {"to_claim": distribution_ms([a for a, _ in parts]),
            "claim_to_call": distribution_ms([b for _, b in parts])}


def _push_stats(side: _Side) -> Mapping[str, Any] | None:
    """The push delivery's counters once nothing is in flight (None: the emulator pushes)."""
    if side.stack.push_stats() is None:
        return None
    return push_answers.settled(lambda: side.stack.push_stats() or {})


async def _sequential(side: _Side) -> dict[str, Any]:
    phase = await _phase(
        side,
        lambda: side.driver.run_sequence(side.config.sequential_runs),
        STEPS_PER_REFERENCE_RUN,
    )
    phase["cost_per_1000_runs"] = cost_per_1000_runs(billed_per_run(phase))
    return phase


async def _concurrent(side: _Side, level: Level) -> dict[str, Any]:
    phase = await _phase(
        side,
        lambda: side.driver.run_pool(level.runs, level.concurrency),
        STEPS_PER_REFERENCE_RUN,
    )
    side.rss_during_load[str(level.concurrency)] = {
        f: tree_peak_rss_mib(side.stack.pid(f))["largest"] for f in STEP_FUNCTIONS
    }
    return {"concurrency": level.concurrency, **phase}


async def _growth(side: _Side, calls: int) -> dict[str, Any]:
    steps_per_run = 2 * calls + 1

    async def runner() -> list[RunResult]:
        return [
            await side.driver.run_once(
                agent="reference-long",
                text=f"reference run, calls={calls}",
                options=RunOptions(max_steps=calls + 1, max_tool_calls=calls),
            )
            for _ in range(side.config.growth_runs)
        ]

    phase = await _phase(side, runner, steps_per_run)
    per_step = phase["per_step"]
    return {
        "tool_calls": calls,
        "steps_per_run": steps_per_run,
        "completed": phase["completed"],
        "runs": phase["runs"],
        "step_overhead_ms": phase["step_overhead_ms"],
        "step_overhead_split_ms": phase["step_overhead_split_ms"],
        "e2e_ms": phase["e2e_ms"],
        "per_step": per_step,
        "per_run": phase["per_run"],
        "counted": phase["counted"],
        "push_answers": phase["push_answers"],
        "errors": phase["errors"],
    }


def growth_verdict(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How reads and bytes read per step change from the shortest to the longest run.

    Quadratic growth of the total would make the per-step figure grow linearly with the
    length; constant per-step reads mean the total grows linearly.
    """
    if len(rows) < 2:
        return {}
    first, last = rows[0], rows[-1]
    length_ratio = last["steps_per_run"] / first["steps_per_run"]

    def ratio(key: str) -> float:
        low = first["per_step"].get(key, 0.0)
        return round(last["per_step"].get(key, 0.0) / low, 2) if low else 0.0

    return {
        "length_ratio": round(length_ratio, 2),
        "docs_read_per_step_ratio": ratio("docs_read"),
        "requests_per_step_ratio": ratio("requests"),
        "bytes_read_per_step_ratio": ratio("bytes_read"),
    }


async def _cold_starts(side: _Side) -> dict[str, Any]:
    times: dict[str, list[float]] = {}
    if side.config.cold_starts < 1:
        return {"seconds": times, "median_s": {}, "max_s": 0.0, "worst_median_s": 0.0,
                "rss_after_first_request_mib": {}}
    idle_rss: dict[str, float] = {}
    cpu: list[float] = []
    meter = CpuMeter({})
    meter.start()
    for function in STEP_FUNCTIONS:
        for _ in range(side.config.cold_starts):
            took, used = await asyncio.to_thread(side.stack.restart, function)
            times.setdefault(function, []).append(round(took, 3))
            cpu.append(used)
        idle_rss[function] = tree_peak_rss_mib(side.stack.pid(function))["largest"]
    load = meter.stop()
    wall = sum(t for ts in times.values() for t in ts)
    medians = {f: round(statistics.median(ts), 3) for f, ts in times.items()}
    return {
        "seconds": times,
        "cpu_s_median": round(statistics.median(cpu), 3),
        "machine_busy_cores": round(load["machine"] / wall, 2) if wall else 0.0,
        "median_s": medians,
        "max_s": max((t for ts in times.values() for t in ts), default=0.0),
        "worst_median_s": max(medians.values(), default=0.0),
        "rss_after_first_request_mib": idle_rss,
    }


async def _emulator_push(side: _Side) -> dict[str, Any]:
    """Sequential and concurrent phases delivered by the emulator's own push loop."""
    config = side.config
    sequential = await _phase(
        side, lambda: side.driver.run_sequence(config.emulator_push_runs), STEPS_PER_REFERENCE_RUN
    )
    result: dict[str, Any] = {"sequential": sequential, "concurrent": []}
    if config.emulator_push_level is not None:
        result["concurrent"].append(await _concurrent(side, config.emulator_push_level))
    return result


def fault_free_answers(result: Mapping[str, Any]) -> dict[str, Any]:
    """Pushes and non-2xx answers over every phase the push delivery delivered (sequential,
    concurrent, growth: nothing is killed or refused in them), per 1,000 steps."""
    phases = [result["sequential"], *result["concurrent"], *result["growth"]["rows"]]
    measured = [p["push_answers"] for p in phases if p.get("push_answers") is not None]
    return {**push_answers.combined(measured), "phases": len(measured)}


class _Clock:
    """Seconds spent in each part of the measurement, for the report."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.parts[name] = round(now - self._last, 1)
        self._last = now


async def _measure(side: _Side) -> dict[str, Any]:
    config = side.config
    project = side.stack.settings.project_id
    clock = _Clock()
    await asyncio.to_thread(side.stack.use_push_delivery)
    await side.driver.run_pool(config.warmup.runs, config.warmup.concurrency)
    await side.driver.run_sequence(config.warmup_runs)
    clock.lap("warmup")
    result: dict[str, Any] = {
        "transport": "push delivery (waiting pulls -> POST, production retry policy and "
                     "push window, see ackloop_dev.devstack.push_delivery)",
        "sequential": await _sequential(side),
        "concurrent": [],
    }
    clock.lap("sequential")
    for level in config.concurrency:
        result["concurrent"].append(await _concurrent(side, level))
        clock.lap(f"concurrent_{level.concurrency}")
    result["peak_rss_mib"] = {
        f: tree_peak_rss_mib(side.stack.pid(f)) for f in STEP_FUNCTIONS
    }
    result["peak_rss_mib_by_concurrency"] = dict(side.rss_during_load)
    growth = [await _growth(side, calls) for calls in config.growth_calls]
    result["growth"] = {"rows": growth, "verdict": growth_verdict(growth)}
    clock.lap("growth")
    result["push_answers"] = fault_free_answers(result)
    if config.emulator_push_runs > 0:
        await asyncio.to_thread(side.stack.use_emulator_push)
        await side.driver.run_sequence(config.warmup_runs)
        result["emulator_push"] = await _emulator_push(side)
        clock.lap("emulator_push")
    result["delivery_floor"] = await measure_delivery_floor(project) if config.probe_floors else {}
    clock.lap("delivery_floor")
    result["cold_start"] = await _cold_starts(side)
    clock.lap("cold_start")
    if config.probe_floors:
        result["lock_floor"] = await measure_lock_floor(project, config.contention_transactions)
        clock.lap("lock_floor")
    result["phase_wall_s"] = clock.parts
    return result


async def measure_ackloop(
    config: AckloopBenchConfig | None = None,
    workdir: Path | str | None = None,
    emulator_ports: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Every ackloop figure of the benchmark, as one JSON-able dict.

    Logs go under ``workdir`` (a temporary directory when omitted, removed afterwards unless
    something failed). ``emulator_ports`` (Pub/Sub, Firestore) reuses running emulators
    instead of starting fresh ones.
    """
    config = config or AckloopBenchConfig()
    own_dir = workdir is None
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ackloop-bench-"))
    t0 = time.perf_counter()
    stack = await asyncio.to_thread(
        BenchStack.start, root / "stack", log_level=config.log_level, emulator_ports=emulator_ports
    )
    started = round(time.perf_counter() - t0, 1)
    watcher = AnswerWatcher(stack.settings)
    driver = RunDriver(stack.settings, watcher, config.run_timeout_s)
    try:
        watcher.start()
        store = AgentStore(FirestoreDocumentDB.connect(stack.settings.project_id),
                           stack.settings.collection_prefix)
        side = _Side(stack, driver, store, config)
        result = {"engine": "ackloop", "config": asdict(config), **await _measure(side)}
    finally:
        driver.close()
        watcher.stop()
        stopping = time.perf_counter()
        await asyncio.to_thread(stack.stop)
    result["phase_wall_s"] |= {"start": started, "stop": round(time.perf_counter() - stopping, 1)}
    result["total_wall_s"] = round(time.perf_counter() - t0, 1)
    if own_dir:
        shutil.rmtree(root, ignore_errors=True)
    else:
        result["workdir"] = str(root)
    return result
