"""What one step costs, and how it grows with the length of a run: the deployed handlers on the
emulators, with traces and metrics on as the local stack writes them.

``python -m ackloop_dev.bench.step_profile [--runs N] [--steps 11,51,101] [--turns 0,25,50]
[--model-seconds S] [--tool-seconds S] [--cold-starts N] [--json FILE] [--workdir DIR]``

A local stack (``ackloop run`` functions, the push delivery, trace files) runs the agent of
:mod:`ackloop_dev.bench.step_agents`: K steps, model -> tool -> ... -> model, one run at a time.
Each function process reaches the emulators through counting proxies of its own
(:mod:`ackloop_dev.bench.wire_meter`). For each length K, over ``--runs`` runs, per step:

* function CPU: user + system CPU of the three step function process trees (ingest, model step,
  tool step), from the run's query to the stack being idle again; the emulators, the push
  delivery and this process are not in it. Idle, these processes still spend CPU (their
  clients' background threads): *net of idle* takes off their rate in the idle second before
  the run, over the run's measured time;
* Firestore round trips and transactions, documents read and written, bytes written (the encoded
  writes of each commit), Pub/Sub publishes, counted on the wire; and the round trips as the
  functions count them themselves (``GET /`` of each, :mod:`ackloop_dev.bench.ackloop_counts`);
* spans: the spans of the run's trace in the stack's trace files.

Then, for the model steps at ``--turns`` of the first run of the longest length: the wire counts
between the start of that model step's delivery span and the start of the next one (the model
step process serves nothing else in between: one run at a time, and tool steps have their own
process and proxies), the delivery span's duration (and the median of every model step's, over
that run), and the model step process's CPU. CPU is
read from ``/proc`` (clock ticks, 10 ms) by a sampler every few milliseconds, too coarse for one
step of a few milliseconds, so the CPU of a turn is the mean over a window of
``--cpu-window`` consecutive model steps starting at that turn (ending at it for the last one).

``--model-seconds`` puts the fake Gemini server (the real client, over HTTP) in front of the
model with that delay on every answer; ``--tool-seconds`` makes each tool call wait.
``--cold-starts`` restarts each step function N times at the end: seconds from spawn to its
first answered request, and the CPU that took (the project's modules compiled to bytecode first,
as the image has them: :mod:`ackloop_dev.bench.bytecode`; ``--no-compile``).

Run with ``PUBSUB_EMULATOR_HOST`` and ``FIRESTORE_EMULATOR_HOST`` set to use running emulators;
otherwise it starts its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from google.cloud import firestore, pubsub_v1  # type: ignore[attr-defined]

from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord, StepRecord
from ackloop.domain.wire import QueryMessage, RunOptions
from ackloop.telemetry.trace_files import Span, read_trace
from ackloop_dev.bench import ackloop_counts, bytecode
from ackloop_dev.bench.approval_cost import emulator_hosts
from ackloop_dev.bench.metered_stack import environment, service_env, start, stop_meters
from ackloop_dev.bench.procstats import CpuMeter, tree_cpu_seconds
from ackloop_dev.bench.step_agents import AGENT, TOOL_SECONDS
from ackloop_dev.bench.wire_meter import Event, WireCounts, WireMeter, start_meter
from ackloop_dev.devstack.stack import (
    FUNCTIONS,
    LocalStack,
    StackOptions,
    isolated_env,
    project_root,
)

PROJECT = "ackloop-step-profile"
STEP_FUNCTIONS = ("ingest", "model_step", "tool_step")
SETUP = "push delivery, setup"
MODEL_SPAN = "ackloop.model_step"
_SETTLED_S = 1.0
"""Wire counts unchanged this long: the stack is done with the run."""
_SAMPLE_EVERY_S = 0.003
_IDLE_S = 1.0
"""Before each run, the function processes' idle CPU is measured over this long."""


class MeasurementError(RuntimeError):
    """The measurement could not be made as designed (a run failed or did not end)."""


@dataclass(frozen=True)
class ProfileConfig:
    """What to run: run lengths, repetitions, the turns looked at, the workload's latencies."""

    steps: tuple[int, ...] = (11, 51, 101)
    runs: int = 2
    turns: tuple[int, ...] = (0, 25, 50)
    cpu_window: int = 5
    model_seconds: float = 0.0
    tool_seconds: float = 0.0
    cold_starts: int = 1
    warmup_steps: int = 5
    """A run of this many steps first, not counted (0: none)."""
    run_timeout_s: float = 600.0


# -- the pure parts ---------------------------------------------------------------------------


def tool_calls_for(steps: int) -> int:
    """Tool calls of a run of ``steps`` steps (model, then tool and model in turn: 2N+1)."""
    if steps < 1 or steps % 2 == 0:
        raise ValueError(f"a run has an odd number of steps (2 * tool calls + 1), not {steps}")
    return (steps - 1) // 2


def parse_ints(text: str) -> tuple[int, ...]:
    """``"11,51,101"`` -> ``(11, 51, 101)``."""
    return tuple(int(part) for part in text.split(",") if part.strip())


def per_step(totals: Mapping[str, float], steps: int, digits: int = 3) -> dict[str, float]:
    """Each total divided by the steps it was spent on."""
    return {k: round(v / steps, digits) if steps else 0.0 for k, v in totals.items()}


def wire_totals(counts: WireCounts) -> dict[str, float]:
    """The wire counts a step profile reports."""
    return {
        "firestore_round_trips": counts.firestore_calls,
        "transactions": counts.transactions,
        "docs_read": counts.firestore_reads,
        "docs_written": counts.firestore_writes + counts.firestore_deletes,
        "bytes_written": counts.firestore_write_bytes,
        "published": counts.published,
    }


def model_turns(spans: Sequence[Span]) -> list[tuple[float, float]]:
    """(start, end) of each model step of a run, in order: from the first delivery span of a
    step to the end of its last (a redelivered step is still one turn)."""
    by_step: dict[str, tuple[float, float]] = {}
    for span in spans:
        if span.get("name") != MODEL_SPAN:
            continue
        key = str((span.get("attributes") or {}).get("ackloop.step", span["span_id"]))
        start, end = float(span["start"]), float(span["end"])
        if key in by_step:
            start, end = min(start, by_step[key][0]), max(end, by_step[key][1])
        by_step[key] = (start, end)
    return sorted(by_step.values())


def summed(events: Sequence[Event], start: float, end: float) -> dict[str, int]:
    """The counts made in ``[start, end)``, by name."""
    sums: dict[str, int] = {}
    for at, name, by in events:
        if start <= at < end:
            sums[name] = sums.get(name, 0) + by
    return sums


def cpu_at(samples: Sequence[tuple[float, float]], when: float) -> float:
    """CPU seconds of the last sample taken at or before ``when`` (the first, if none was)."""
    found = samples[0][1] if samples else 0.0
    for at, cpu in samples:
        if at > when:
            break
        found = cpu
    return found


def turn_window(turns: Sequence[tuple[float, float]], turn: int, window: int,
                settled_at: float) -> tuple[int, int, float, float]:
    """The model steps ``[first, last]`` a turn's CPU is averaged over (``window`` of them from
    ``turn``, shifted back at the end of the run), and the time span they cover: from the
    first one's start to the next model step's start, or ``settled_at`` after the last."""
    first = max(0, min(turn, len(turns) - window))
    last = min(len(turns) - 1, first + window - 1)
    end = turns[last + 1][0] if last + 1 < len(turns) else settled_at
    return first, last, turns[first][0], end


def turn_profile(turns: Sequence[tuple[float, float]], events: Sequence[Event],
                 samples: Sequence[tuple[float, float]], turn: int, window: int,
                 settled_at: float) -> dict[str, Any]:
    """One model step's figures: its wire counts and span, and the windowed CPU."""
    start, end = turns[turn]
    until = turns[turn + 1][0] if turn + 1 < len(turns) else settled_at
    counts = summed(events, start, until)
    first, last, w_start, w_end = turn_window(turns, turn, window, settled_at)
    cpu = cpu_at(samples, w_end) - cpu_at(samples, w_start)
    return {
        "turn": turn,
        "span_ms": round((end - start) * 1000, 1),
        "firestore_round_trips": counts.get("firestore_calls", 0),
        "docs_read": sum(counts.get(k, 0) for k in
                         ("docs_found", "docs_missing", "query_docs", "empty_queries")),
        "docs_written": counts.get("firestore_writes", 0) + counts.get("firestore_deletes", 0),
        "bytes_written": counts.get("firestore_write_bytes", 0),
        "top_level_bytes_written": counts.get("firestore_top_write_bytes", 0),
        "cpu_ms": round(cpu * 1000 / (last - first + 1), 2),
        "cpu_window": [first, last],
    }


# -- the measurement --------------------------------------------------------------------------


class _Sampler:
    """The CPU seconds of one process tree, read every few milliseconds on a thread."""

    def __init__(self, pid: int) -> None:
        root = psutil.Process(pid)
        self._procs = [root, *root.children(recursive=True)]
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)

    def _read(self) -> float:
        total = 0.0
        for proc in self._procs:
            with contextlib.suppress(psutil.Error):
                t = proc.cpu_times()
                total += t.user + t.system
        return total

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._read()))
            self._stop.wait(_SAMPLE_EVERY_S)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.samples.append((time.time(), self._read()))


@dataclass
class _Session:
    stack: LocalStack
    meters: dict[str, tuple[WireMeter, WireMeter]]
    firestore_host: str
    pubsub_host: str
    env: dict[str, str]
    config: ProfileConfig
    log: Callable[[str], object]
    db: Any = None
    publisher: Any = None
    traces: Path = field(default_factory=Path)

    def __post_init__(self) -> None:
        with environment(FIRESTORE_EMULATOR_HOST=self.firestore_host,
                          PUBSUB_EMULATOR_HOST=self.pubsub_host):
            self.db = firestore.Client(project=PROJECT)
            self.publisher = pubsub_v1.PublisherClient()
        self.traces = self.stack.directory / "traces"

    @property
    def prefix(self) -> str:
        return self.env["ACKLOOP_COLLECTION_PREFIX"]

    def wire(self) -> dict[str, WireCounts]:
        return {name: pubsub.counts().plus(fs.counts())
                for name, (pubsub, fs) in self.meters.items()}

    def total(self) -> WireCounts:
        total = WireCounts()
        for counts in self.wire().values():
            total = total.plus(counts)
        return total

    def pid(self, name: str) -> int:
        pid = self.stack.processes[name].pid
        assert pid is not None, f"{name} is not running"
        return pid

    def counters(self) -> dict[str, dict[str, Any]]:
        assert self.stack.state is not None
        ports = self.stack.state.ports
        return {name: httpx.get(f"http://127.0.0.1:{ports[name]}/", timeout=10).json()
                for name in STEP_FUNCTIONS}

    def settled(self, timeout: float = 60.0) -> float:
        """Wait until nothing billable has happened for a while; returns when that began."""
        deadline = time.monotonic() + timeout
        before, since = self.total().billed(), time.time()
        while time.monotonic() < deadline:
            time.sleep(_SETTLED_S / 4)
            now = self.total().billed()
            if now != before:
                before, since = now, time.time()
            elif time.time() - since >= _SETTLED_S:
                return since
        raise MeasurementError(f"the stack did not settle in {timeout:g} s")

    def start_run(self, steps: int) -> str:
        calls = tool_calls_for(steps)
        request_id = f"profile-{uuid.uuid4().hex[:16]}"
        query = QueryMessage(request_id=request_id, text=f"step profile, calls={calls}",
                             agent=AGENT,
                             options=RunOptions(max_steps=calls + 1, max_tool_calls=calls))
        topic = self.publisher.topic_path(PROJECT, self.env["ACKLOOP_QUERIES_TOPIC"])
        self.publisher.publish(topic, query.model_dump_json().encode()).result(timeout=30)
        return run_id_for_request(request_id)

    def run_record(self, run_id: str) -> RunRecord | None:
        snap = self.db.document(f"{self.prefix}runs/{run_id}").get()
        return RunRecord.model_validate(snap.to_dict()) if snap.exists else None

    def steps(self, run_id: str) -> list[StepRecord]:
        col = self.db.collection(f"{self.prefix}runs/{run_id}/steps")
        return [StepRecord.model_validate(s.to_dict()) for s in col.stream()]

    def until_ended(self, run_id: str) -> RunRecord:
        deadline = time.monotonic() + self.config.run_timeout_s
        while time.monotonic() < deadline:
            run = self.run_record(run_id)
            if run is not None and run.status.terminal:
                return run
            time.sleep(0.1)
        raise MeasurementError(f"run {run_id} did not end in {self.config.run_timeout_s:g} s")


@dataclass
class _OneRun:
    run_id: str
    steps: int
    wire: WireCounts
    counted: dict[str, float]
    cpu_s: dict[str, float]
    spans: dict[str, int]
    settled_at: float
    idle_cpu_s: float
    """What the function processes would have used idle over the run's measured time (their
    rate in the idle second before it)."""


def _one_run(session: _Session, steps: int) -> _OneRun:
    session.settled()
    pids = {name: session.pid(name) for name in STEP_FUNCTIONS}
    idle = CpuMeter(pids)
    idle.start()
    time.sleep(_IDLE_S)
    idle_cpu = sum(idle.stop()[f] for f in STEP_FUNCTIONS)
    wire_before, counters_before = session.total(), session.counters()
    meter = CpuMeter(pids)
    meter.start()
    began = time.monotonic()
    run_id = session.start_run(steps)
    run = session.until_ended(run_id)
    settled_at = session.settled()
    cpu = meter.stop()
    wall = time.monotonic() - began
    if run.status.value != "completed":
        raise MeasurementError(f"run {run_id} ended {run.status.value}: {run.error}")
    made = len(session.steps(run_id))
    if made != steps:
        raise MeasurementError(f"run {run_id} made {made} steps, not {steps}")
    counted = ackloop_counts.difference(counters_before, session.counters())["total"]
    spans: dict[str, int] = {}
    for span in read_trace(session.traces, run.trace_id or ""):
        service = str(span.get("service"))
        spans[service] = spans.get(service, 0) + 1
    return _OneRun(run_id, made, session.total().minus(wire_before), counted, cpu, spans,
                   settled_at, idle_cpu / _IDLE_S * wall)


def _length(session: _Session, steps: int) -> dict[str, Any]:
    """``config.runs`` runs of ``steps`` steps, summed and divided by the steps they made."""
    runs = [_one_run(session, steps) for _ in range(session.config.runs)]
    made = sum(r.steps for r in runs)
    wire = WireCounts()
    for r in runs:
        wire = wire.plus(r.wire)
    cpu = sum(r.cpu_s[f] for r in runs for f in STEP_FUNCTIONS)
    idle = sum(r.idle_cpu_s for r in runs)
    spans: dict[str, int] = {}
    for r in runs:
        for service, n in r.spans.items():
            spans[service] = spans.get(service, 0) + n
    function_spans = sum(n for s, n in spans.items() if s in STEP_FUNCTIONS)
    counted = {k: sum(r.counted.get(k, 0.0) for r in runs)
               for k in ("requests", "docs_read", "docs_written", "published")}
    return {
        "steps_per_run": steps,
        "runs": len(runs),
        "steps": made,
        "per_step": {
            "function_cpu_ms": round(cpu * 1000 / made, 2),
            "function_cpu_ms_net_of_idle": round(max(0.0, cpu - idle) * 1000 / made, 2),
            **per_step(wire_totals(wire), made),
            "function_spans": round(function_spans / made, 2),
            "spans": round(sum(spans.values()) / made, 2),
        },
        "function_cpu_ms_by_function": {
            f: round(sum(r.cpu_s[f] for r in runs) * 1000 / made, 2) for f in STEP_FUNCTIONS},
        "counted_by_functions_per_step": per_step(counted, made),
        "spans_by_service": spans,
        "run_ids": [r.run_id for r in runs],
    }


def _turns(session: _Session, steps: int) -> dict[str, Any]:
    """One more run of ``steps`` steps, with the model step's CPU sampled and its proxy's
    counts timed, cut into the model turns asked for."""
    _, fs_meter = session.meters["model_step"]
    from_event = len(fs_meter.timeline())
    session.settled()
    with _Sampler(session.pid("model_step")) as sampler:
        run_id = session.start_run(steps)
        run = session.until_ended(run_id)
        settled_at = session.settled()
    events = fs_meter.timeline()[from_event:]
    turns = model_turns(read_trace(session.traces, run.trace_id or ""))
    window = max(1, min(session.config.cpu_window, len(turns)))
    rows = [turn_profile(turns, events, sampler.samples, t, window, settled_at)
            for t in session.config.turns if t < len(turns)]
    spans_ms = [(end - start) * 1000 for start, end in turns]
    return {"steps_per_run": steps, "run_id": run_id, "model_turns": len(turns),
            "cpu_window": window, "samples": len(sampler.samples), "rows": rows,
            "span_ms_p50": round(statistics.median(spans_ms), 1) if spans_ms else None}


def _cold_starts(session: _Session) -> dict[str, Any]:
    """Each step function killed and started again: seconds to its first answered request,
    and CPU seconds by then (median over the restarts)."""
    found: dict[str, Any] = {}
    for name in STEP_FUNCTIONS:
        took, cpu = [], []
        for _ in range(session.config.cold_starts):
            session.stack.processes[name].kill()
            began = time.monotonic()
            session.stack.start_service(name).wait_ready(60.0)
            took.append(time.monotonic() - began)
            cpu.append(tree_cpu_seconds(session.pid(name)))
        found[name] = {"seconds": round(statistics.median(took), 3),
                       "cpu_s": round(statistics.median(cpu), 3)}
    return found


def _configure_model(session: _Session) -> None:
    seconds = session.config.model_seconds
    if seconds <= 0:
        return
    assert session.stack.state is not None and session.stack.state.fake_gemini_url
    httpx.post(f"{session.stack.state.fake_gemini_url}/_admin/faults",
               json={"fault_rate": 1.0, "fault_kinds": f"delay:{seconds:g}"},
               timeout=10).raise_for_status()


def measure(directory: Path, config: ProfileConfig, *, pubsub_host: str, firestore_host: str,
            log: Callable[[str], object] = lambda _: None) -> dict[str, Any]:
    """Start a stack behind counting proxies on the given emulators, profile it, stop it."""
    meters = {name: (start_meter(pubsub_host),
                     start_meter(firestore_host, timeline=name == "model_step"))
              for name in (SETUP, *FUNCTIONS)}
    setup_pubsub, setup_firestore = meters[SETUP]
    slow_model = config.model_seconds > 0
    env = {**isolated_env(f"p{uuid.uuid4().hex[:8]}", PROJECT), "ACKLOOP_LOG_LEVEL": "WARNING",
           TOOL_SECONDS: f"{config.tool_seconds:g}"}
    if not slow_model:
        env["ACKLOOP_MODEL_PROVIDER"] = "scripted"
    stack = LocalStack(StackOptions(
        directory=directory, project_id=PROJECT, pubsub_port=setup_pubsub.port,
        firestore_port=setup_firestore.port, start_emulators=False, base_port=0,
        sandbox_apis=False, fake_gemini=slow_model, extra_env=env, sweep_every_s=None,
        services=FUNCTIONS, agents="ackloop_dev.bench.step_agents:agents",
        service_env=service_env(meters, SETUP),
    ))
    try:
        start(stack, log)
        session = _Session(stack, meters, firestore_host, pubsub_host, env, config, log)
        try:
            _configure_model(session)
            return _measure(session)
        finally:
            session.publisher.stop()
            session.db.close()
    finally:
        stack.down()
        stop_meters(meters)


def _measure(session: _Session) -> dict[str, Any]:
    config, log = session.config, session.log
    began = time.monotonic()
    if config.warmup_steps:
        log(f"warm-up run of {config.warmup_steps} steps (not counted)")
        _one_run(session, config.warmup_steps)
    lengths = []
    for steps in config.steps:
        log(f"{config.runs} run(s) of {steps} steps")
        lengths.append(_length(session, steps))
    longest = max(config.steps)
    log(f"one more run of {longest} steps, cut into model turns {list(config.turns)}")
    turns = _turns(session, longest)
    cold = {}
    if config.cold_starts > 0:
        log(f"cold starts: {config.cold_starts} per step function")
        cold = _cold_starts(session)
    return {"config": asdict(config), "lengths": lengths, "turns": turns, "cold_start": cold,
            "wall_s": round(time.monotonic() - began, 1)}


# -- the report -------------------------------------------------------------------------------

_COLUMNS = (("function CPU ms", "function_cpu_ms"),
            ("  net of idle", "function_cpu_ms_net_of_idle"),
            ("FS round trips", "firestore_round_trips"),
            ("transactions", "transactions"),
            ("docs read", "docs_read"),
            ("docs written", "docs_written"),
            ("bytes written", "bytes_written"),
            ("publishes", "published"),
            ("spans (fn)", "function_spans"),
            ("spans (all)", "spans"))


def render(result: Mapping[str, Any]) -> str:
    """The tables: per step by run length, then per model turn of the longest run."""
    config = result["config"]
    lines = [f"per step (mean over {config['runs']} run(s) of each length; model "
             f"{config['model_seconds']:g} s, tools {config['tool_seconds']:g} s)",
             f"{'steps/run':>10}" + "".join(f"{title:>16}" for title, _ in _COLUMNS)]
    for row in result["lengths"]:
        values = row["per_step"]
        lines.append(f"{row['steps_per_run']:>10}"
                     + "".join(f"{values[key]:>16g}" for _, key in _COLUMNS))
    lines.append("round trips as the functions count them (requests: + begin and commit of "
                 "each transaction): " + ", ".join(
                     f"{row['steps_per_run']} steps "
                     f"{row['counted_by_functions_per_step']['requests']:g}"
                     for row in result["lengths"]))
    lines.append("function CPU ms per step of the run, by function: " + "; ".join(
        f"{row['steps_per_run']} steps " + ", ".join(
            f"{f} {v:g}" for f, v in row["function_cpu_ms_by_function"].items())
        for row in result["lengths"]))
    turns = result["turns"]
    lines += ["", f"model step by turn, run of {turns['steps_per_run']} steps "
              f"({turns['model_turns']} model turns; CPU: mean over {turns['cpu_window']} "
              "model steps from the turn, /proc sampled)",
              f"{'turn':>6}{'span ms':>10}{'FS round trips':>16}{'docs read':>11}"
              f"{'docs written':>14}{'bytes written':>15}{'of which run/conv':>19}{'CPU ms':>9}"
              "  CPU window"]
    for t in turns["rows"]:
        lines.append(f"{t['turn']:>6}{t['span_ms']:>10g}{t['firestore_round_trips']:>16}"
                     f"{t['docs_read']:>11}{t['docs_written']:>14}{t['bytes_written']:>15}"
                     f"{t.get('top_level_bytes_written', 0):>19}"
                     f"{t['cpu_ms']:>9g}  turns {t['cpu_window'][0]}-{t['cpu_window'][1]}")
    lines.append("(of which run/conv: bytes written to the run's and the conversation's own "
                 "documents, which only the step that ends the run writes)")
    lines.append(f"model step span, p50 over the run's {turns['model_turns']} model turns: "
                 f"{turns.get('span_ms_p50')} ms")
    if result.get("cold_start"):
        lines += ["", "cold start (spawn -> first answered request; median): " + ", ".join(
            f"{name} {c['seconds']:g} s, {c['cpu_s']:g} s CPU"
            for name, c in result["cold_start"].items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each length (default 2)")
    parser.add_argument("--steps", default="11,51,101",
                        help="run lengths in steps, odd numbers (default 11,51,101)")
    parser.add_argument("--turns", default="0,25,50",
                        help="model turns of the longest run to profile (default 0,25,50)")
    parser.add_argument("--cpu-window", type=int, default=5,
                        help="model steps a turn's CPU is averaged over (default 5)")
    parser.add_argument("--model-seconds", type=float, default=0.0,
                        help="delay of every model answer (fake Gemini; default 0: the "
                        "in-process scripted model)")
    parser.add_argument("--tool-seconds", type=float, default=0.0,
                        help="wait of every tool call (default 0)")
    parser.add_argument("--cold-starts", type=int, default=1,
                        help="restarts of each step function at the end (default 1; 0: none)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--workdir", type=Path, help="keep the stack's logs and traces here")
    bytecode.add_argument(parser)
    args = parser.parse_args(argv)
    try:
        steps = parse_ints(args.steps)
        for k in steps:
            tool_calls_for(k)
        turns = parse_ints(args.turns)
    except ValueError as exc:
        parser.error(str(exc))
    if args.runs < 1 or args.cpu_window < 1 or args.cold_starts < 0 or not steps:
        parser.error("--runs and --cpu-window must be positive, --cold-starts not negative")
    if args.model_seconds < 0 or args.tool_seconds < 0:
        parser.error("--model-seconds and --tool-seconds must not be negative")
    config = ProfileConfig(steps=steps, runs=args.runs, turns=turns, cpu_window=args.cpu_window,
                           model_seconds=args.model_seconds, tool_seconds=args.tool_seconds,
                           cold_starts=args.cold_starts,
                           run_timeout_s=60.0 + max(steps) * (1.0 + args.model_seconds
                                                              + args.tool_seconds))
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="step-profile-"))

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    if not args.no_compile:
        bytecode.compile_sources(project_root())
    with emulator_hosts(directory, log) as (pubsub, fs):
        result = measure(directory / "stack", config, pubsub_host=pubsub, firestore_host=fs,
                         log=log)
    print(render(result))
    if args.json is not None:
        command = "python -m ackloop_dev.bench.step_profile " + shlex.join(sys.argv[1:])
        args.json.write_text(json.dumps({"command": command, **result}, indent=2))


if __name__ == "__main__":
    main()
