"""Delta latency: from the fake model sending a chunk to a client of the API reading its text.

Starts a local stack on the emulators (those the environment names, else two of its own) whose
model steps call the fake Gemini server through google-genai's streaming client, with every
ackloop setting at its shipped value (the API's stream polls every ``api_stream_poll_seconds``,
0.5 s; the delta writer flushes every ``stream_flush_seconds``, 0.25 s). For each run it follows
``GET /runs/{id}/events`` and times every ``delta`` event against the fake server's record of
when it sent the last chunk whose text the delta carries (``GET /_admin/chunks``).

    python -m ackloop_dev.bench.delta_latency [--runs 8] [--chunk-chars 8] [--chunk-delay 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

from ackloop_dev.bench.approval_cost import emulator_hosts
from ackloop_dev.devstack.stack import LocalStack, StackOptions, isolated_env

PROJECT = "ackloop-bench"
QUESTION = "write me something about the quiet harbour"  # the default agent answers in verse


@dataclass(frozen=True)
class DeltaLatency:
    runs: int
    deltas: int
    chunks: int
    median_ms: float
    p90_ms: float
    max_ms: float
    chunk_chars: int
    chunk_delay_s: float


def latencies(chunks: list[dict[str, float | str]], deltas: list[tuple[str, float]]
              ) -> list[float]:
    """For each delta (its text, when the client read it), the seconds since the fake model
    sent the last chunk whose text the delta carries. Both are one call's, in order."""
    ends: list[tuple[int, float]] = []
    offset = 0
    for chunk in chunks:
        offset += len(str(chunk["text"]))
        ends.append((offset, float(chunk["at"])))
    measured, shown = [], 0
    for text, received in deltas:
        shown += len(text)
        sent = next(at for end, at in ends if end >= shown)
        measured.append(received - sent)
    return measured


def _one_run(api: httpx.Client, fake: str) -> tuple[list[float], int, int]:
    httpx.post(f"{fake}/_admin/reset", timeout=5).raise_for_status()
    created = api.post("/runs", json={"text": QUESTION})
    created.raise_for_status()
    run_id = created.json()["run_id"]
    deltas: list[tuple[str, float]] = []
    with api.stream("GET", f"/runs/{run_id}/events") as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line:
                continue
            event = json.loads(line)
            if event["type"] == "delta":
                deltas.append((event["text"], time.time()))
            elif event["type"] == "finished":
                if event.get("status") != "completed":
                    raise RuntimeError(f"run {run_id} ended {event.get('status')}: {event}")
                break
    chunks = httpx.get(f"{fake}/_admin/chunks", timeout=5).json()["chunks"]
    return latencies(chunks, deltas), len(deltas), len(chunks)


def measure(directory: Path, *, pubsub_host: str, firestore_host: str, runs: int,
            chunk_chars: int, chunk_delay: float,
            log: Callable[[str], object] = lambda _: None) -> DeltaLatency:
    """Start the stack, time ``runs`` runs' deltas, stop everything it started."""
    env = {**isolated_env(f"d{uuid.uuid4().hex[:8]}", PROJECT), "ACKLOOP_LOG_LEVEL": "WARNING"}
    stack = LocalStack(StackOptions(
        directory=directory, project_id=PROJECT, pubsub_port=int(pubsub_host.split(":")[1]),
        firestore_port=int(firestore_host.split(":")[1]), start_emulators=False, base_port=0,
        sandbox_apis=True, fake_gemini=True, extra_env=env, sweep_every_s=None))
    saved = dict(os.environ)
    try:
        try:
            state = stack.up(log=log)
        finally:  # up() points this process at the stack; the caller's environment stays
            os.environ.clear()
            os.environ.update(saved)
        assert state.fake_gemini_url and state.api_url
        fake = state.fake_gemini_url
        httpx.post(f"{fake}/_admin/stream", json={"delay": chunk_delay,
                                                 "chunk_chars": chunk_chars},
                   timeout=5).raise_for_status()
        measured: list[float] = []
        deltas = chunks = 0
        with httpx.Client(base_url=state.api_url, timeout=120) as api:
            _one_run(api, fake)  # warm-up, not counted
            for n in range(runs):
                found, d, c = _one_run(api, fake)
                log(f"run {n + 1}/{runs}: {d} deltas of {c} chunks, median "
                    f"{statistics.median(found) * 1000:.0f} ms")
                measured += found
                deltas, chunks = deltas + d, chunks + c
    finally:
        stack.down()
    ordered = sorted(measured)
    return DeltaLatency(
        runs=runs, deltas=deltas, chunks=chunks,
        median_ms=round(statistics.median(ordered) * 1000, 1),
        p90_ms=round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] * 1000, 1),
        max_ms=round(ordered[-1] * 1000, 1), chunk_chars=chunk_chars, chunk_delay_s=chunk_delay)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--chunk-chars", type=int, default=8,
                        help="characters of text per streamed chunk")
    parser.add_argument("--chunk-delay", type=float, default=0.1,
                        help="seconds between the fake model's chunks")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--workdir", type=Path, help="keep the stack's logs here")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.chunk_chars < 1 or args.chunk_delay < 0:
        parser.error("--runs and --chunk-chars must be positive, --chunk-delay not negative")
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="delta-latency-"))

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    with emulator_hosts(directory, log) as (pubsub, fs):
        result = measure(directory, pubsub_host=pubsub, firestore_host=fs, runs=args.runs,
                         chunk_chars=args.chunk_chars, chunk_delay=args.chunk_delay, log=log)
    print(f"delta latency, fake model's chunk -> API client, shipped settings: {result.deltas} "
          f"deltas of {result.chunks} chunks in {result.runs} runs ({result.chunk_chars} "
          f"characters every {result.chunk_delay_s:g} s): median {result.median_ms:.0f} ms, "
          f"p90 {result.p90_ms:.0f} ms, max {result.max_ms:.0f} ms")
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(result), indent=2))


if __name__ == "__main__":
    main()
