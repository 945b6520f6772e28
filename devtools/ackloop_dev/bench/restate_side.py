"""The Restate peer of ``ackloop bench``: the reference workload on a single-node Restate server.

Optional: it runs when ``restate-server`` (npm ``@restatedev/restate-server``, on the PATH or
named by ``ACKLOOP_RESTATE_SERVER``) and the Python packages ``restate-sdk`` and ``hypercorn``
are there (:func:`unavailable` says what is missing otherwise). The server runs in a directory
of its own with every port on 127.0.0.1 and its telemetry off; the service
(:mod:`ackloop_dev.bench.restate_service`) is served by hypercorn in its own process and
registered through the admin API; each run is one request to the ingress, which answers with
the run's result. Its figures have the shape of a Temporal storage's.

Set up as Restate's docs describe: the server's defaults (its partitions and memory pools are
sized for production, docs.restate.dev/server/memory; this machine holds them), only the ports,
the data directory and telemetry set; the Python service as an ASGI app served by hypercorn,
which speaks the HTTP/2 the server uses to call it, and registered through the admin API.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import psutil

from ackloop_dev.bench.procstats import (
    MachineCpu,
    own_cpu_seconds,
    tree_cpu_seconds,
    tree_peak_rss_mib,
)
from ackloop_dev.bench.temporal_side import distribution_ms
from ackloop_dev.devstack import emulators

REFERENCE_CALLS = 2


@dataclass(frozen=True)
class RestateBenchConfig:
    """How much of the workload to run on Restate (the Temporal side's sizes)."""

    warmup_runs: int = 5
    sequential_runs: int = 100
    concurrency: tuple[tuple[int, int], ...] = ((50, 500), (200, 1000))
    """(runs in flight, runs) of each concurrent phase."""
    run_timeout_s: float = 120.0

    @classmethod
    def quick(cls) -> RestateBenchConfig:
        return cls(warmup_runs=3, sequential_runs=20, concurrency=((50, 100), (200, 200)))


def server_binary() -> str | None:
    """The ``restate-server`` to run, or None."""
    return os.environ.get("ACKLOOP_RESTATE_SERVER") or shutil.which("restate-server")


def unavailable() -> str | None:
    """Why the Restate peer cannot run here, or None when it can."""
    missing = [name for name, module in (("restate-sdk", "restate"), ("hypercorn", "hypercorn"))
               if importlib.util.find_spec(module) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (pip install restate-sdk hypercorn)"
    if server_binary() is None:
        return ("no restate-server (npm install -g @restatedev/restate-server, or set "
                "ACKLOOP_RESTATE_SERVER)")
    return None


def step_gaps(timings: list[list[float]]) -> list[float]:
    """Seconds from each step's end to the next one's start."""
    return [b[0] - a[1] for a, b in pairwise(timings)]


@dataclass
class _Run:
    ok: bool
    seconds: float
    gaps: list[float]
    first_step: float | None = None
    error: str | None = None


def summarise(runs: list[_Run], wall: float, cpu: dict[str, float]) -> dict[str, Any]:
    """One phase in the report's shape."""
    done = [r for r in runs if r.ok]
    per_run = max(len(done), 1)
    return {
        "runs": len(runs),
        "completed": len(done),
        "failed": len(runs) - len(done),
        "wall_s": round(wall, 3),
        "runs_per_s": round(len(done) / wall, 2) if wall > 0 else 0.0,
        "e2e_ms": distribution_ms([r.seconds for r in done]),
        "step_overhead_ms": distribution_ms([g for r in done for g in r.gaps]),
        "cpu_s": {k: round(v, 3) for k, v in cpu.items()},
        "cpu_ms_per_run": {k: round(v * 1000 / per_run, 2) for k, v in cpu.items()},
        "errors": sorted({r.error for r in runs if r.error})[:5],
    }


class _Processes:
    """The server and the service, started here, stopped by PID."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = {name: emulators.free_port()
                      for name in ("fabric", "admin", "ingress", "service")}
        self.server: subprocess.Popen[bytes] | None = None
        self.service: subprocess.Popen[bytes] | None = None
        self.service_spawned = 0.0

    def start_server(self) -> None:
        binary = server_binary()
        assert binary is not None
        env = {**os.environ, "RESTATE_DISABLE_TELEMETRY": "true", "RESTATE_LISTEN_MODE": "tcp",
               "RESTATE_BIND_IP": "127.0.0.1", "RESTATE_BIND_PORT": str(self.ports["fabric"]),
               "RESTATE_ADMIN__BIND_PORT": str(self.ports["admin"]),
               "RESTATE_INGRESS__BIND_PORT": str(self.ports["ingress"]),
               "RESTATE_BASE_DIR": str(self.root / "restate-data"), "RESTATE_NODE_NAME": "bench"}
        with (self.root / "restate-server.log").open("wb") as log:
            self.server = subprocess.Popen([binary, "--no-logo"], env=env, stdout=log,
                                           stderr=subprocess.STDOUT)
        _wait(lambda: httpx.get(self.url("admin", "/health"), timeout=2).status_code == 200,
              60.0, "restate-server")

    def start_service(self) -> None:
        self.service_spawned = time.time()
        with (self.root / "restate-service.log").open("wb") as log:
            self.service = subprocess.Popen(
                [sys.executable, "-m", "hypercorn", "--bind",
                 f"127.0.0.1:{self.ports['service']}",
                 "ackloop_dev.bench.restate_service:app"], stdout=log, stderr=subprocess.STDOUT)
        uri = f"http://127.0.0.1:{self.ports['service']}"

        def registered() -> bool:
            answer = httpx.post(self.url("admin", "/deployments"), json={"uri": uri},
                                timeout=10)
            return answer.status_code in (200, 201)

        _wait(registered, 60.0, "the service's registration")

    def url(self, port: str, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[port]}{path}"

    def cpu(self) -> dict[str, float]:
        assert self.server is not None and self.service is not None
        return {"server": tree_cpu_seconds(self.server.pid),
                "service": tree_cpu_seconds(self.service.pid), "client": own_cpu_seconds()}

    def peak_rss_mb(self) -> dict[str, float]:
        assert self.server is not None and self.service is not None
        # The largest process of each tree: the server binary, not the npm launcher.
        return {name: tree_peak_rss_mib(proc.pid)["largest"]
                for name, proc in (("server", self.server), ("service", self.service))}

    def stop(self) -> None:
        """Stop the service, then the server, with whatever they started (the npm package's
        ``restate-server`` is a launcher that runs the binary as its child), by PID."""
        for proc in (self.service, self.server):
            if proc is None or proc.poll() is not None:
                continue
            try:
                children = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                children = []
            for child in children:
                with contextlib.suppress(psutil.Error):
                    child.terminate()
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
            _gone, alive = psutil.wait_procs(children, timeout=15)
            for child in alive:
                with contextlib.suppress(psutil.Error):
                    child.kill()


def _wait(ready: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not ready in {timeout:g} s")


async def _one(http: httpx.AsyncClient) -> _Run:
    started = time.time()
    try:
        answer = await http.post("/reference/run", json=REFERENCE_CALLS)
        answer.raise_for_status()
        timings: list[list[float]] = answer.json()
    except Exception as exc:  # a failed run is a measurement, not a crash
        return _Run(False, time.time() - started, [], error=repr(exc))
    return _Run(True, time.time() - started, step_gaps(timings),
                timings[0][0] if timings else None)


async def _phase(procs: _Processes, http: httpx.AsyncClient, runs: int,
                 concurrency: int) -> dict[str, Any]:
    before, machine = procs.cpu(), MachineCpu.now().busy_s
    gate = asyncio.Semaphore(concurrency)

    async def gated() -> _Run:
        async with gate:
            return await _one(http)

    t0 = time.perf_counter()
    results = list(await asyncio.gather(*(gated() for _ in range(runs))))
    wall = time.perf_counter() - t0
    cpu = {k: v - before[k] for k, v in procs.cpu().items()}
    cpu["total"] = sum(cpu.values())
    cpu["other"] = max(0.0, MachineCpu.now().busy_s - machine - cpu["total"])
    return summarise(results, wall, cpu)


async def _measure(procs: _Processes, config: RestateBenchConfig) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=max(c for c, _ in config.concurrency or ((1, 1),)))
    async with httpx.AsyncClient(base_url=procs.url("ingress", ""), limits=limits,
                                 timeout=config.run_timeout_s) as http:
        first = await _one(http)
        if not first.ok:
            raise RuntimeError(f"the first Restate run failed: {first.error}")
        cold = (first.first_step or time.time()) - procs.service_spawned
        await _phase(procs, http, config.warmup_runs, 1)
        result: dict[str, Any] = {
            "storage": "restate",
            "cold_start_s": round(cold, 3),
            "sequential": await _phase(procs, http, config.sequential_runs, 1),
            "concurrent": [],
        }
        for concurrency, runs in config.concurrency:
            phase = await _phase(procs, http, runs, concurrency)
            result["concurrent"].append({"concurrency": concurrency, **phase})
    result["peak_rss_mb"] = procs.peak_rss_mb()
    return result


async def measure_restate(config: RestateBenchConfig,
                          workdir: Path | None = None) -> dict[str, Any]:
    """Start the server and the service, run the phases, stop both; every figure as one dict."""
    root = workdir or Path(tempfile.mkdtemp(prefix="restate-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    procs = _Processes(root)
    try:
        await asyncio.to_thread(procs.start_server)
        await asyncio.to_thread(procs.start_service)
        result = await _measure(procs, config)
    finally:
        await asyncio.to_thread(procs.stop)
    result |= {"engine": "restate", "config": asdict(config),
               "total_wall_s": round(time.perf_counter() - t0, 1)}
    if workdir is None:
        shutil.rmtree(root, ignore_errors=True)
    return result
