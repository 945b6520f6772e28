"""The DBOS Transact peer of ``ackloop bench``: the reference workload on PostgreSQL.

Optional: it runs when the ``dbos`` package and PostgreSQL's binaries are on the machine
(:func:`unavailable` says what is missing otherwise). A throwaway server on a loopback port
(:mod:`ackloop_dev.bench.pg_local`), then one process (:mod:`ackloop_dev.bench.dbos_worker`)
that is DBOS's application: it starts each run as a workflow and runs its steps, checkpointed in
PostgreSQL. Its figures have the shape of a Temporal storage's (``sequential``, ``concurrent``,
``cold_start_s``, ``peak_rss_mb``), so the report puts them in a column of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ackloop_dev.bench.pg_local import LocalPostgres, pg_bin
from ackloop_dev.bench.procstats import peak_rss_bytes
from ackloop_dev.bench.temporal_side import distribution_ms
from ackloop_dev.devstack import emulators


@dataclass(frozen=True)
class DbosBenchConfig:
    """How much of the workload to run on DBOS (the Temporal side's sizes)."""

    warmup_runs: int = 5
    sequential_runs: int = 100
    concurrency: tuple[tuple[int, int], ...] = ((50, 500), (200, 1000))
    """(runs in flight, runs) of each concurrent phase."""
    timeout_s: float = 900.0

    @classmethod
    def quick(cls) -> DbosBenchConfig:
        return cls(warmup_runs=3, sequential_runs=20, concurrency=((50, 100), (200, 200)),
                   timeout_s=300.0)


def unavailable() -> str | None:
    """Why the DBOS peer cannot run here, or None when it can."""
    if importlib.util.find_spec("dbos") is None:
        return "the dbos package is not installed (pip install 'ackloop-dev[bench]')"
    if pg_bin() is None:
        return "no PostgreSQL binaries (initdb, pg_ctl) on this machine"
    return None


def summarise(phase: dict[str, Any]) -> dict[str, Any]:
    """One phase of the worker's output in the report's shape."""
    results = phase["results"]
    done = [r for r in results if r["ok"]]
    wall = phase["wall_s"]
    per_run = max(len(done), 1)
    cpu = phase["cpu_s"]
    return {
        "runs": len(results),
        "completed": len(done),
        "failed": len(results) - len(done),
        "wall_s": round(wall, 3),
        "runs_per_s": round(len(done) / wall, 2) if wall > 0 else 0.0,
        "e2e_ms": distribution_ms([r["seconds"] for r in done]),
        "step_overhead_ms": distribution_ms([g for r in done for g in r["gaps"]]),
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_ms_per_run": {k: round(v * 1000 / per_run, 2) for k, v in cpu.items()},
        "errors": sorted({r["error"] for r in results if r.get("error")})[:5],
    }


def summarise_worker(out: dict[str, Any], postgres_rss_mb: float) -> dict[str, Any]:
    """The whole side: cold start, phases, peak RSS."""
    return {
        "storage": "postgresql",
        "cold_start_s": round(out["cold_start_s"], 3),
        "sequential": summarise(out["sequential"]),
        "concurrent": [{"concurrency": p["concurrency"], **summarise(p)}
                       for p in out["concurrent"]],
        "peak_rss_mb": {"worker": out["peak_rss_mb"], "postgres": postgres_rss_mb},
        "checkpointed_steps": out.get("checkpointed_steps"),
    }


def _postgres_rss_mb(pid: int) -> float:
    import psutil

    try:
        tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return 0.0
    return round(max((peak_rss_bytes(p.pid) for p in tree), default=0) / 2**20, 1)


def _run_worker(pg: LocalPostgres, config: DbosBenchConfig, log_path: Path) -> dict[str, Any]:
    worker_config = {"warmup_runs": config.warmup_runs,
                     "sequential_runs": config.sequential_runs,
                     "concurrency": [list(c) for c in config.concurrency]}
    spawned = time.time()
    with log_path.open("w") as log:
        done = subprocess.run(
            [sys.executable, "-m", "ackloop_dev.bench.dbos_worker",
             "--database-url", pg.database_url("dbos_bench"), "--postgres-pid", str(pg.pid()),
             "--spawned-at", repr(spawned), "--config", json.dumps(worker_config)],
            stdout=subprocess.PIPE, stderr=log, text=True, timeout=config.timeout_s,
            check=False)
    if done.returncode != 0 or not done.stdout.strip():
        tail = log_path.read_text()[-2000:]
        raise RuntimeError(f"the DBOS worker failed ({done.returncode}): {tail}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def measure_dbos_sync(config: DbosBenchConfig, workdir: Path | None = None) -> dict[str, Any]:
    """Start PostgreSQL, run the worker, stop PostgreSQL; every figure as one dict."""
    root = workdir or Path(tempfile.mkdtemp(prefix="dbos-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    # Not under ``root``: the server runs as another OS user, who must be able to reach it.
    pg_dir = Path(tempfile.mkdtemp(prefix="ackloop-pg-"))
    try:
        pg = LocalPostgres.start(pg_dir, emulators.free_port())
        try:
            out = _run_worker(pg, config, root / "dbos-worker.log")
            result = summarise_worker(out, _postgres_rss_mb(pg.pid()))
        finally:
            pg.stop()
            with contextlib.suppress(OSError):
                shutil.copy(pg_dir / "postgres.log", root / "postgres.log")
    finally:
        shutil.rmtree(pg_dir, ignore_errors=True)
    result |= {"engine": "dbos", "config": asdict(config), "postgres": pg.bin_dir.parent.name,
               "total_wall_s": round(time.perf_counter() - t0, 1)}
    if workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    return result


async def measure_dbos(config: DbosBenchConfig, workdir: Path | None = None) -> dict[str, Any]:
    """:func:`measure_dbos_sync` off the event loop."""
    return await asyncio.to_thread(measure_dbos_sync, config, workdir)
