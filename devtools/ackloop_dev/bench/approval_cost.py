"""What one approval costs, measured on the emulators through every process of a local stack.

``python -m ackloop_dev.bench.approval_cost [--wait SECONDS] [--json FILE] [--workdir DIR]``

The same run of the same agent (:mod:`ackloop_dev.bench.approval_agents`) twice through the
local stack (``ackloop run`` functions, the API, the push delivery, the sweeper every 60 s as
deployed), on the scripted model: "pay 50 to Ada" runs its payment at once, "pay 500 to Ada"
waits for a decision, which is made through the real route ``POST /runs/{id}/approvals/{step}``.
Every process reaches the emulators through a counting proxy (:mod:`ackloop_dev.bench.wire_meter`),
so the figures are what Firestore and Pub/Sub would bill for each run, whoever asked: the
functions, the API's decision, the sweeper. Each service has proxies of its own, so the counts
are also told apart by process. The script watches the runs by reading Firestore
directly, around the proxy, so its own polling is not counted.

Also measured: the waiting itself (``--wait`` seconds of a waiting run, the sweeper at its
shipped interval), and one sweeper pass (``POST /sweep``) while the run waits and once no run
does. Run with ``PUBSUB_EMULATOR_HOST`` and ``FIRESTORE_EMULATOR_HOST`` set to use running
emulators; otherwise it starts its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from google.cloud import firestore

from ackloop.domain.cost import PRICES, Cost, PriceTable
from ackloop.domain.records import RunRecord, StepRecord
from ackloop.engine.spend import rolled_up
from ackloop_dev.bench.approval_agents import AGENT
from ackloop_dev.bench.metered_stack import environment, service_env, start, stop_meters
from ackloop_dev.bench.wire_meter import WireCounts, WireMeter, start_meter
from ackloop_dev.devstack import emulators
from ackloop_dev.devstack.processes import ManagedProcess, wait_all
from ackloop_dev.devstack.stack import (
    SCHEDULER,
    SERVICES,
    LocalStack,
    StackOptions,
    isolated_env,
)

PROJECT = "ackloop-approval-cost"
SHIPPED_SWEEP_EVERY_S = 60.0
"""Cloud Scheduler's sweep job: every minute (``infra/scheduler.tf``)."""
WITHOUT = "pay 50 to Ada"
WITH = "pay 500 to Ada"
_SETTLED_S = 2.0
"""Counts unchanged this long: the stack is done with what the run asked of it."""
_CLEAR_OF_SWEEP_S = 30.0
"""A measured phase starts only this far from the next scheduled sweep."""


class MeasurementError(RuntimeError):
    """The measurement could not be made as designed (a run did not end, a sweep intruded)."""


@dataclass(frozen=True)
class RunCost:
    """What one run asked of the emulators, and of the API."""

    run_id: str
    counts: WireCounts
    by_process: dict[str, WireCounts]
    """The same counts, by the process that asked (the push delivery's pulls are its own)."""
    api_calls: int
    documents: int
    """Documents the run leaves (its run, steps, conversation, transcript): each one is a TTL
    delete at the end of its retention."""
    stop_reason: str | None
    ledger: Cost
    """What the run's own cost ledger recorded (its ingest and steps, :mod:`ackloop.engine.spend`):
    each delivery's reads and writes up to its commit, nothing of the API's decision."""


@dataclass(frozen=True)
class ApprovalCost:
    """The measurement: both runs, the wait, and a sweeper pass."""

    without: RunCost
    with_approval: RunCost
    wait_seconds: float
    wait: WireCounts
    sweeps_during_wait: int
    sweep_every_s: float
    sweep_waiting: WireCounts
    """One ``POST /sweep`` while the run waits."""
    sweep_idle: WireCounts
    """One ``POST /sweep`` once no run is running."""

    def as_dict(self) -> dict[str, Any]:
        """Every figure, as JSON values."""
        figures: dict[str, Any] = json.loads(json.dumps(
            asdict(self), default=lambda cost: cost.model_dump(mode="json")))
        return figures


Reading = dict[str, WireCounts]
"""Counts by process."""
SETUP = "push delivery, setup"
"""The proxies every process not given its own uses: the push delivery and the topology."""


def _minus(a: Reading, b: Reading) -> Reading:
    return {name: a[name].minus(b[name]) for name in a}


def _plus(a: Reading, b: Reading) -> Reading:
    return {name: a[name].plus(b[name]) for name in a}


def _total(reading: Reading) -> WireCounts:
    total = WireCounts()
    for counts in reading.values():
        total = total.plus(counts)
    return total


def usd(counts: WireCounts, requests: int, prices: PriceTable = PRICES) -> float:
    """``counts`` and ``requests`` Cloud Run requests at list prices (request CPU time is not
    in it: it is not measured here)."""
    return (counts.firestore_reads * prices.firestore_read
            + counts.firestore_writes * prices.firestore_write
            + counts.firestore_deletes * prices.firestore_delete
            + (counts.published_bytes + counts.delivered_bytes) * prices.pubsub_byte
            + requests * prices.run_request)


def requests_of(run: RunCost) -> int:
    """Cloud Run requests: one per push delivery and per API call."""
    return run.counts.delivered + run.api_calls


class _Probe:
    """Reads the stack's runs straight from the emulator, around the proxy."""

    def __init__(self, firestore_host: str, prefix: str) -> None:
        with environment(FIRESTORE_EMULATOR_HOST=firestore_host):
            self.client = firestore.Client(project=PROJECT)
        self.prefix = prefix

    def run(self, run_id: str) -> RunRecord | None:
        snap = self.client.document(f"{self.prefix}runs/{run_id}").get()
        return RunRecord.model_validate(snap.to_dict()) if snap.exists else None

    def steps(self, run_id: str) -> list[StepRecord]:
        col = self.client.collection(f"{self.prefix}runs/{run_id}/steps")
        return [StepRecord.model_validate(s.to_dict()) for s in col.stream()]

    def documents(self, run: RunRecord) -> int:
        roots = [f"{self.prefix}runs/{run.run_id}",
                 f"{self.prefix}conversations/{run.conversation_id}"]
        return sum(self._under(self.client.document(path)) for path in roots)

    def _under(self, ref: Any) -> int:
        found = 1 if ref.get().exists else 0
        for collection in ref.collections():
            found += sum(self._under(doc) for doc in collection.list_documents())
        return found


class _Session:
    """The stack, the proxies and the probe of one measurement."""

    def __init__(self, stack: LocalStack, meters: dict[str, tuple[WireMeter, WireMeter]],
                 probe: _Probe,
                 sweep_every_s: float, log: Callable[[str], object]) -> None:
        self.stack = stack
        self.meters = meters
        self.probe = probe
        self.sweep_every_s = sweep_every_s
        self.log = log
        self.started = time.time()
        assert stack.state is not None
        self.api = f"http://127.0.0.1:{stack.state.ports['api']}"
        self.http = httpx.Client(base_url=self.api, timeout=30.0)

    def reading(self) -> Reading:
        return {name: pubsub.counts().plus(fs.counts())
                for name, (pubsub, fs) in self.meters.items()}

    def sweeps(self) -> dict[str, Any]:
        assert self.stack.state is not None
        port = self.stack.state.ports[SCHEDULER]
        stats: dict[str, Any] = httpx.get(f"http://127.0.0.1:{port}/_stats", timeout=5).json()
        return stats

    def clear_of_sweeps(self) -> int:
        """Wait, if need be, until the next scheduled sweep is at least a while away; returns
        the sweeps made so far (to check that none ran during the phase that follows)."""
        stats = self.sweeps()
        last = stats["last"].get("at") if stats["calls"] else self.started
        due = float(last) + self.sweep_every_s
        if due - time.time() < _CLEAR_OF_SWEEP_S:
            self.log(f"  waiting {max(0.0, due - time.time()) + 3:.0f} s for the scheduled "
                     "sweep to pass")
            while self.sweeps()["calls"] == stats["calls"]:
                time.sleep(0.5)
            time.sleep(1.0)
            stats = self.sweeps()
        return int(stats["calls"])

    def settled(self, timeout: float = 60.0) -> Reading:
        """The counts once nothing billable has happened for a while."""
        deadline = time.monotonic() + timeout
        before = self.reading()
        while time.monotonic() < deadline:
            time.sleep(_SETTLED_S)
            now = self.reading()
            if _total(now).billed() == _total(before).billed():
                return now
            before = now
        raise MeasurementError(f"the stack did not settle in {timeout:g} s")

    def until(self, run_id: str, what: str, check: Callable[[RunRecord, list[StepRecord]], bool],
              timeout: float = 60.0) -> tuple[RunRecord, list[StepRecord]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.probe.run(run_id)
            if run is not None:
                steps = self.probe.steps(run_id)
                if check(run, steps):
                    return run, steps
                if run.status.terminal:
                    raise MeasurementError(f"run {run_id} ended {run.status} before {what}")
            time.sleep(0.2)
        raise MeasurementError(f"run {run_id}: no {what} within {timeout:g} s")

    def start_run(self, text: str) -> str:
        answer = self.http.post("/runs", json={"text": text, "agent": AGENT,
                                               "request_id": uuid.uuid4().hex})
        answer.raise_for_status()
        run_id: str = answer.json()["run_id"]
        return run_id

    def no_sweep_since(self, calls: int, phase: str) -> None:
        if self.sweeps()["calls"] != calls:
            raise MeasurementError(f"a scheduled sweep ran during {phase}; run it again")

    def sweep_once(self) -> WireCounts:
        """One ``POST /sweep``, as the scheduled job makes it, and what it asked."""
        calls = self.clear_of_sweeps()
        before = self.settled()
        self.http.post("/sweep").raise_for_status()
        after = self.settled()
        self.no_sweep_since(calls, "a sweeper pass")
        return _total(_minus(after, before))


def _ended(run: RunRecord, steps: list[StepRecord]) -> bool:
    return run.status.terminal


def _waits(run: RunRecord, steps: list[StepRecord]) -> bool:
    return any(s.waiting is not None and s.decision is None for s in steps)


def _run_without(session: _Session) -> RunCost:
    calls = session.clear_of_sweeps()
    before = session.settled()
    run_id = session.start_run(WITHOUT)
    session.until(run_id, "end", _ended)
    counts = _minus(session.settled(), before)
    session.no_sweep_since(calls, "the run without approval")
    return _run_cost(session, run_id, counts, 1)


def _run_cost(session: _Session, run_id: str, counts: Reading, api_calls: int) -> RunCost:
    run = session.probe.run(run_id)
    assert run is not None
    return RunCost(run_id, _total(counts), counts, api_calls, session.probe.documents(run),
                   run.stop_reason.value if run.stop_reason else None,
                   rolled_up(run, session.probe.steps(run_id)))


def measure(directory: Path, *, pubsub_host: str, firestore_host: str, wait_seconds: float,
            sweep_every_s: float = SHIPPED_SWEEP_EVERY_S,
            log: Callable[[str], object] = lambda _: None) -> ApprovalCost:
    """Start a stack on the emulators at ``pubsub_host`` / ``firestore_host`` behind counting
    proxies, run both runs, the wait and the sweeper passes, and stop everything it started."""
    meters = {name: (start_meter(pubsub_host), start_meter(firestore_host))
              for name in (SETUP, *SERVICES)}
    setup_pubsub, setup_firestore = meters[SETUP]
    tag = f"a{uuid.uuid4().hex[:8]}"
    env = {**isolated_env(tag, PROJECT), "ACKLOOP_MODEL_PROVIDER": "scripted",
           "ACKLOOP_LOG_LEVEL": "WARNING"}
    stack = LocalStack(StackOptions(
        directory=directory, project_id=PROJECT, pubsub_port=setup_pubsub.port,
        firestore_port=setup_firestore.port, start_emulators=False, base_port=0, sandbox_apis=False,
        fake_gemini=False, extra_env=env, sweep_every_s=sweep_every_s,
        agents="ackloop_dev.bench.approval_agents:agents",
        service_env=service_env(meters, SETUP),
    ))
    try:
        probe = _Probe(firestore_host, env["ACKLOOP_COLLECTION_PREFIX"])
        start(stack, log)
        session = _Session(stack, meters, probe, sweep_every_s, log)
        try:
            return _measure(session, wait_seconds)
        finally:
            session.http.close()
    finally:
        stack.down()
        stop_meters(meters)


def _measure(session: _Session, wait_seconds: float) -> ApprovalCost:
    log = session.log
    log("warm-up run (not counted)")
    _run_without(session)
    log(f"run without approval: {WITHOUT!r}")
    without = _run_without(session)

    log(f"run with approval: {WITH!r}")
    calls = session.clear_of_sweeps()
    before = session.settled()
    run_id = session.start_run(WITH)
    _, steps = session.until(run_id, "wait", _waits)
    waiting = session.settled()
    session.no_sweep_since(calls, "the run with approval, up to its wait")
    first = _minus(waiting, before)

    log("one sweeper pass while the run waits (POST /sweep)")
    sweep_waiting = session.sweep_once()

    log(f"waiting {wait_seconds:g} s, the sweeper every {session.sweep_every_s:g} s")
    calls = int(session.sweeps()["calls"])
    before = session.reading()
    time.sleep(wait_seconds)
    wait = _total(_minus(session.settled(), before))
    sweeps = int(session.sweeps()["calls"]) - calls

    log("approving through POST /runs/{id}/approvals/{step}")
    (step,) = [s.key for s in steps if s.waiting is not None and s.decision is None]
    calls = session.clear_of_sweeps()
    before = session.settled()
    session.http.post(f"/runs/{run_id}/approvals/{step}",
                      json={"decision": "approve"}).raise_for_status()
    session.until(run_id, "end", _ended)
    second = _minus(session.settled(), before)
    session.no_sweep_since(calls, "the run with approval, after its decision")
    with_approval = _run_cost(session, run_id, _plus(first, second), 2)

    log("one sweeper pass with no run running")
    sweep_idle = session.sweep_once()
    return ApprovalCost(without, with_approval, wait_seconds, wait, sweeps,
                        session.sweep_every_s, sweep_waiting, sweep_idle)


_ROWS: list[tuple[str, Callable[[RunCost], float]]] = [
    ("Firestore document reads (billed)", lambda r: r.counts.firestore_reads),
    ("  documents got", lambda r: r.counts.docs_found),
    ("  lookups of missing documents", lambda r: r.counts.docs_missing),
    ("  documents returned by queries", lambda r: r.counts.query_docs),
    ("  queries that returned none", lambda r: r.counts.empty_queries),
    ("Firestore writes", lambda r: r.counts.firestore_writes),
    ("Firestore deletes", lambda r: r.counts.firestore_deletes),
    ("Firestore transactions", lambda r: r.counts.transactions),
    ("Pub/Sub publishes", lambda r: r.counts.published),
    ("Pub/Sub push deliveries", lambda r: r.counts.delivered),
    ("Pub/Sub billed bytes", lambda r: r.counts.published_bytes + r.counts.delivered_bytes),
    ("Cloud Run requests (pushes + API calls)", requests_of),
    ("documents left (TTL deletes later)", lambda r: r.documents),
    ("run's cost ledger: Firestore reads", lambda r: r.ledger.firestore_reads),
    ("run's cost ledger: Firestore writes", lambda r: r.ledger.firestore_writes),
]


def render(result: ApprovalCost, prices: PriceTable = PRICES) -> str:
    """The table: with / without / difference, and what the difference costs."""
    a, b = result.with_approval, result.without
    lines = [f"{'':<42}{'with':>12}{'without':>12}{'difference':>12}"]
    for label, value in _ROWS:
        lines.append(f"{label:<42}{value(a):>12g}{value(b):>12g}{value(a) - value(b):>12g}")
    cost_a, cost_b = usd(a.counts, requests_of(a), prices), usd(b.counts, requests_of(b), prices)
    lines.append(f"{'USD at list prices (' + prices.date + ')':<42}{cost_a:>12.8f}"
                 f"{cost_b:>12.8f}{cost_a - cost_b:>12.8f}")
    lines.append("(Firestore reads, writes, deletes; Pub/Sub bytes; Cloud Run requests. Request "
                 "CPU time and the later TTL deletes are not in the dollars.)")
    lines += ["", "difference by process (reads, writes, transactions, publishes):"]
    for name, counts in a.by_process.items():
        d = counts.minus(b.by_process[name])
        if any((d.firestore_reads, d.firestore_writes, d.transactions, d.published)):
            lines.append(f"  {name:<22}{d.firestore_reads:>+5d}{d.firestore_writes:>+5d}"
                         f"{d.transactions:>+5d}{d.published:>+5d}")
    w, s, idle = result.wait, result.sweep_waiting, result.sweep_idle
    lines += [
        "",
        f"waiting {result.wait_seconds:g} s (sweeper every {result.sweep_every_s:g} s, "
        f"{result.sweeps_during_wait} scheduled pass(es) in it): {w.firestore_reads} reads, "
        f"{w.firestore_writes} writes, {w.firestore_deletes} deletes, {w.transactions} "
        f"transactions, {w.published} publishes, {w.delivered} deliveries",
        f"one sweeper pass while the run waits: {s.firestore_reads} reads ({s.query_docs} "
        f"documents returned, {s.empty_queries} empty queries), {s.firestore_writes} writes, "
        f"{s.published} publishes",
        f"one sweeper pass with no run running: {idle.firestore_reads} reads "
        f"({idle.query_docs} documents returned, {idle.empty_queries} empty queries), "
        f"{idle.firestore_writes} writes, {idle.published} publishes",
    ]
    return "\n".join(lines)


@contextlib.contextmanager
def emulator_hosts(directory: Path, log: Callable[[str], object]) -> Iterator[tuple[str, str]]:
    """The emulators the environment names, else two started here (and stopped after)."""
    pubsub, fs = os.environ.get("PUBSUB_EMULATOR_HOST"), os.environ.get("FIRESTORE_EMULATOR_HOST")
    if pubsub and fs:
        yield pubsub, fs
        return
    jars = emulators.find_jars()
    ports = emulators.free_port(), emulators.free_port()
    logs = directory / "logs"
    started: list[ManagedProcess] = [emulators.pubsub_process(jars, ports[0], logs).start(),
                                     emulators.firestore_process(jars, ports[1], logs).start()]
    try:
        wait_all(started, 60.0)
        log(f"emulators started: Pub/Sub :{ports[0]}, Firestore :{ports[1]}")
        yield f"127.0.0.1:{ports[0]}", f"127.0.0.1:{ports[1]}"
    finally:
        for proc in started:
            proc.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wait", type=float, default=75.0,
                        help="seconds to leave the run waiting (default 75: one scheduled "
                        "sweep falls in it)")
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--workdir", type=Path, help="keep the stack's logs here")
    args = parser.parse_args(argv)
    if args.wait <= 0:
        parser.error("--wait must be positive")
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="approval-cost-"))

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with emulator_hosts(directory, log) as (pubsub, fs):
        result = measure(directory, pubsub_host=pubsub, firestore_host=fs,
                         wait_seconds=args.wait, log=log)
    print(render(result))
    if args.json is not None:
        command = "python -m ackloop_dev.bench.approval_cost " + shlex.join(sys.argv[1:])
        args.json.write_text(json.dumps({"command": command, **result.as_dict()}, indent=2))


if __name__ == "__main__":
    main()
