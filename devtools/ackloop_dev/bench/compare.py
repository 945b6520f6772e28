"""``ackloop bench``: both engines, one after the other, in one invocation; one result dict.

The ackloop side runs first (emulators + functions), then the Temporal side (dev server with
SQLite, and in-memory unless ``--quick``), then DBOS Transact on PostgreSQL and Restate when
they are installed, each alone on the machine. Both sides' process CPU is
recorded next to wall time, and each section records how busy the whole machine was, so a run
disturbed by other load shows it. A section that fails is reported as failed (``meta.failed``
and the report), and the others still run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import platform
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from ackloop_dev.bench.ackloop_side import AckloopBenchConfig, measure_ackloop
from ackloop_dev.bench.procstats import MachineCpu
from ackloop_dev.bench.targets import check_targets


@dataclass(frozen=True)
class BenchOptions:
    """What one ``ackloop bench`` invocation runs."""

    quick: bool = False
    ackloop: bool = True
    temporal: bool = True
    kill: bool = False
    """Also run the Temporal worker-kill recovery tests (about a minute more)."""
    dbos: bool = True
    """Also run DBOS Transact on PostgreSQL, when it is installed (skipped, saying why, when
    it is not)."""
    restate: bool = True
    """Also run Restate (a local single-node server), when it is installed (likewise)."""
    workdir: Path | None = None
    command: str = "ackloop bench"


def machine() -> str:
    """A one-line description of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as info:
            cpu = next((line.split(":", 1)[1].strip() for line in info
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    memory = psutil.virtual_memory().total / 2**30
    return (f"{os.cpu_count()} cores ({cpu}), {memory:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}")


async def _section(name: str, key: str, coro: Any, result: dict[str, Any], log: Any) -> None:
    """Run one section into ``result[key]``, its load into the metadata. A section that fails
    is its own failure: it is recorded (``meta.failed``: its exception, in one line), shown
    in the report, and the sections after it still run."""
    log(f"[{name}] starting")
    busy = MachineCpu.now().busy_s
    t0 = time.perf_counter()
    try:
        result[key] = await coro
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
        result["meta"].setdefault("failed", {})[key] = why
        log(f"[{name}] FAILED: {why}")
    wall = time.perf_counter() - t0
    result["meta"]["sections"][key] = {
        "wall_s": round(wall, 1),
        "machine_busy_cpu_s": round(MachineCpu.now().busy_s - busy, 1),
        "load_average_1m": round(os.getloadavg()[0], 2)}
    if key in result:
        log(f"[{name}] done in {wall:.0f} s")


def _temporal_config(options: BenchOptions) -> Any:
    from ackloop_dev.bench.temporal_side import TemporalBenchConfig

    config = TemporalBenchConfig.quick() if options.quick else TemporalBenchConfig()
    return config if options.kill else replace(config, kill_modes=())


async def run_bench(options: BenchOptions, log: Any = print) -> dict[str, Any]:
    """Run the selected sides and return every figure, the targets and the metadata."""
    started = dt.datetime.now(dt.UTC)
    workdir = options.workdir
    result: dict[str, Any] = {
        "meta": {
            "date": started.strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(),
            "command": options.command,
            "quick": options.quick,
            "sections": {},
        }
    }
    if options.ackloop:
        config = AckloopBenchConfig.quick() if options.quick else AckloopBenchConfig()
        coro = measure_ackloop(config, workdir / "ackloop" if workdir else None)
        await _section("ackloop", "ackloop", coro, result, log)
        await _cold_query(options, result, log)
    if options.temporal:
        from ackloop_dev.bench.temporal_side import measure_temporal

        where = workdir / "temporal" if workdir else None
        coro = measure_temporal(_temporal_config(options), where)
        await _section("temporal", "temporal", coro, result, log)
    if options.dbos:
        await _dbos(options, result, log)
    if options.restate:
        await _restate(options, result, log)
    if "ackloop" in result:
        result["targets"] = check_targets(result["ackloop"], result.get("temporal"))
    result["meta"]["total_wall_s"] = round(
        (dt.datetime.now(dt.UTC) - started).total_seconds(), 1)
    return result


async def _cold_query(options: BenchOptions, result: dict[str, Any], log: Any) -> None:
    """A question on services scaled to zero against a warm one, per deployment layout."""
    from ackloop_dev.bench.cold_query import LAYOUTS, measure_on_own_emulators

    samples = 2 if options.quick else 5
    workdir = options.workdir / "cold_query" if options.workdir else None
    coro = measure_on_own_emulators(samples, list(LAYOUTS), workdir, log)
    await _section("cold query", "cold_query", coro, result, log)


async def _dbos(options: BenchOptions, result: dict[str, Any], log: Any) -> None:
    from ackloop_dev.bench.dbos_side import DbosBenchConfig, measure_dbos, unavailable

    if reason := unavailable():
        log(f"[dbos] skipped: {reason}")
        result["meta"].setdefault("skipped", {})["dbos"] = reason
        return
    config = DbosBenchConfig.quick() if options.quick else DbosBenchConfig()
    coro = measure_dbos(config, options.workdir / "dbos" if options.workdir else None)
    await _section("dbos", "dbos", coro, result, log)


async def _restate(options: BenchOptions, result: dict[str, Any], log: Any) -> None:
    from ackloop_dev.bench.restate_side import RestateBenchConfig, measure_restate, unavailable

    if reason := unavailable():
        log(f"[restate] skipped: {reason}")
        result["meta"].setdefault("skipped", {})["restate"] = reason
        return
    config = RestateBenchConfig.quick() if options.quick else RestateBenchConfig()
    coro = measure_restate(config, options.workdir / "restate" if options.workdir else None)
    await _section("restate", "restate", coro, result, log)


def run_bench_sync(options: BenchOptions, log: Any = print) -> dict[str, Any]:
    """:func:`run_bench` from synchronous code."""
    return asyncio.run(run_bench(options, log))
