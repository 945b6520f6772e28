"""Runs against a Gemini quota: what a deployment meets first, measured from outside.

``python -m ackloop_dev.bench.quota_workload [--runs 40] [--calls 5] [--rpm 60]
[--spread 60] [--rounding floor|ceil] [--style gemini-api|vertex]
[--limiter off|fixed|adaptive] [--headroom 0.02]
[--capacity RPM@SECONDS,...] [--timeout 900] [--json F]``

Starts a local stack on free ports whose fake Gemini server enforces ``--rpm`` requests a
minute as the Gemini API does (:mod:`ackloop_dev.fakes.gemini_quota`: a 429
``RESOURCE_EXHAUSTED`` with a ``RetryInfo`` delay, rounded down by default as Gemini rounds it,
so a wait under a second reads ``"0s"``; ``--style vertex``: a bare 429, as Vertex AI's shared
pool answers). It asks ``--runs`` runs of the benchmark's
``reference-long`` agent, each making ``--calls`` model calls, spread evenly over ``--spread``
seconds, follows each to its end through ``GET /runs/{id}`` and samples the model server and
the push delivery every second. ``--limiter`` declares the quota to the stack's services
(``ACKLOOP_MODEL_QUOTAS``: ``--rpm`` requests a minute, ``--headroom`` under it, fixed or
adaptive; off: no limiter, as before it existed); ``--capacity`` changes what the server allows
while the runs go (``40@120,60@300``: 40 a minute from 120 s after the first ask, 60 from 300 s).
It prints, and writes as JSON:

- the runs: completed, failed (by reason), not ended within ``--timeout``; their wall time
  from the ask to the end, p50 and p95;
- the model: requests answered, requests refused with a 429, 429s per answered request;
- the quota used: requests answered in each whole minute from the first ask until the last run
  ended, against the quota, and the minutes in which none was served while runs were unfinished;
- the push delivery: redeliveries and non-2xx answers, by subscription, and the most model-step
  pushes in flight at once.

No figure is asserted: run it before and after a change and compare.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ackloop_dev.agents import CATALOG
from ackloop_dev.bench.printed import printed
from ackloop_dev.bench.stack_runs import ask_and_follow, free_stack

AGENT = "reference-long"
PADDED = "reference-padded"


@dataclass
class Ended:
    """One run as its asker saw it."""

    run_id: str
    status: str
    error: str | None
    seconds: float


@dataclass
class Samples:
    """What the sampler saw, one entry a second: (seconds since the first ask, requests
    answered so far, model-step pushes in flight)."""

    points: list[tuple[float, int, int]] = field(default_factory=list)
    tokens: list[tuple[float, int]] = field(default_factory=list)
    """(seconds since the first ask, input tokens the server counted in its last minute)."""


def _follow(api: str, agent: str, text: str, deadline: float) -> Ended:
    started = time.monotonic()
    try:
        view = ask_and_follow(api, agent, text, deadline, poll_s=0.25)
    except TimeoutError:
        return Ended("", "unfinished", None, round(time.monotonic() - started, 3))
    return Ended(str(view["run_id"]), str(view["status"]), view.get("error"),
                 round(time.monotonic() - started, 3))


def _model_in_flight(push: dict[str, Any]) -> int:
    return sum(int(s.get("in_flight", 0)) for name, s in push["subscriptions"].items()
               if "model" in name)


def _sample(stack: Any, gemini: str, began: float, stop: threading.Event,
            samples: Samples) -> None:
    while not stop.is_set():
        try:
            stats = httpx.get(f"{gemini}/_admin/stats", timeout=5.0).json()
            answered = int(stats["answered"])
            tokens = int(stats["quota"]["in_window"]["input_tokens"])
            in_flight = _model_in_flight(stack.push_stats())
        except (httpx.HTTPError, KeyError, ValueError):
            answered, in_flight = (samples.points[-1][1] if samples.points else 0), 0
            tokens = samples.tokens[-1][1] if samples.tokens else 0
        at = round(time.monotonic() - began, 2)
        samples.points.append((at, answered, in_flight))
        samples.tokens.append((at, tokens))
        stop.wait(1.0)


def per_minute(points: list[tuple[float, int, int]], until: float) -> list[int]:
    """Requests answered in each whole minute from 0 to ``until`` seconds, from the cumulative
    samples (the count at the last sample at or before each minute's edge)."""
    def at(t: float) -> int:
        seen = [answered for when, answered, _ in points if when <= t]
        return seen[-1] if seen else 0

    return [at(60.0 * (m + 1)) - at(60.0 * m) for m in range(int(until // 60))]


def tokens_at_minutes(points: list[tuple[float, int]], until: float) -> list[int]:
    """The server's input tokens of the last minute, as sampled at each whole minute's edge
    from 60 s to ``until`` (what each minute used: its window is that minute)."""
    found = []
    for edge in range(60, int(until) + 1, 60):
        seen = [tokens for at, tokens in points if at <= edge]
        found.append(seen[-1] if seen else 0)
    return found


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def figures(args: argparse.Namespace, ended: list[Ended], samples: Samples,
            gemini_stats: dict[str, Any], push: dict[str, Any], wall: float) -> dict[str, Any]:
    """The JSON the run prints and writes (pure: tested on its own)."""
    statuses = Counter(e.status for e in ended)
    failed = Counter((e.error or "no reason")[:80] for e in ended if e.status == "failed")
    answered = int(gemini_stats.get("answered", 0))
    refused = int(gemini_stats.get("faults_served", {}).get("quota", 0))
    last_end = max((e.seconds for e in ended), default=0.0) + args.spread
    minutes = per_minute(samples.points, min(wall, last_end))
    subscriptions = {name.rsplit("/", 1)[-1]: {"redeliveries": s.get("redeliveries", 0),
                                               "non_2xx": {k: v for k, v in s["answers"].items()
                                                           if not k.startswith("2")}}
                     for name, s in push["subscriptions"].items()}
    seconds = [e.seconds for e in ended]
    return {
        "workload": {"runs": args.runs, "model_calls_per_run": args.calls,
                     "spread_s": args.spread, "requests_per_minute": args.rpm,
                     "input_tokens_per_minute": args.tpm, "pad_words": args.pad,
                     "retry_delay_rounding": args.rounding, "style": args.style,
                     "limiter": args.limiter,
                     "headroom": args.headroom, "capacity": args.capacity},
        "runs": {"completed": statuses.get("completed", 0), "failed": statuses.get("failed", 0),
                 "other": {k: v for k, v in statuses.items() if k not in ("completed", "failed")},
                 "failed_by_reason": dict(failed),
                 "seconds_p50": _percentile(seconds, 0.5),
                 "seconds_p95": _percentile(seconds, 0.95)},
        "model": {"answered": answered, "refused_429": refused,
                  "429_per_answered": round(refused / answered, 2) if answered else None},
        "quota_used_per_minute": minutes,
        "quota_used_share": [round(m / args.rpm, 2) for m in minutes] if args.rpm else None,
        "input_tokens_in_the_last_minute_at_each_minute": (
            tokens := tokens_at_minutes(samples.tokens, min(wall, last_end))),
        "input_tokens_share": ([round(t / args.tpm, 3) for t in tokens] if args.tpm else None),
        "minutes_at_zero_while_unfinished": sum(1 for m in minutes if m == 0),
        "push": {"redeliveries": sum(s["redeliveries"] for s in subscriptions.values()),
                 "by_subscription": subscriptions,
                 "model_pushes_in_flight_max": max((p[2] for p in samples.points), default=0)},
        "wall_s": round(wall, 1),
    }


def capacity_plan(text: str) -> list[tuple[float, int]]:
    """``--capacity``'s changes, in time order: (seconds after the first ask, requests a
    minute)."""
    plan = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        rpm, _, at = part.partition("@")
        plan.append((float(at), int(rpm)))
    return sorted(plan)


def limiter_env(args: argparse.Namespace) -> dict[str, str]:
    """The stack's model quota for ``--limiter`` (none when off)."""
    if args.limiter == "off":
        return {}
    return {"ACKLOOP_MODEL_QUOTAS": json.dumps([{
        "model": "*", "rpm": args.rpm or None, "tpm": args.tpm or None, "mode": args.limiter,
        "headroom": args.headroom}])}


def _change_capacity(gemini: str, began: float, plan: list[tuple[float, int]],
                     stop: threading.Event) -> None:
    for at, rpm in plan:
        if stop.wait(max(0.0, began + at - time.monotonic())):
            return
        httpx.post(f"{gemini}/_admin/quota", json={"requests_per_minute": rpm}
                   ).raise_for_status()


def run(args: argparse.Namespace) -> dict[str, Any]:
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="ackloop-quota-"))
    stack = free_stack(directory, "ackloop-quota", CATALOG, fake_gemini=True,
                       extra_env=limiter_env(args))
    state = stack.up(log=lambda line: print(line, file=sys.stderr))
    try:
        gemini = state.fake_gemini_url
        assert gemini is not None
        httpx.post(f"{gemini}/_admin/quota", json={
            "requests_per_minute": args.rpm or None,
            "input_tokens_per_minute": args.tpm or None,
            "rounding": args.rounding, "style": args.style}).raise_for_status()
        text = f"look up calls={args.calls - 1}" + (f" pad={args.pad}" if args.pad else "")
        agent = PADDED if args.pad else AGENT
        began = time.monotonic()
        deadline = began + args.spread + args.timeout
        samples, stop = Samples(), threading.Event()
        sampler = threading.Thread(target=_sample, args=(stack, gemini, began, stop, samples),
                                   daemon=True)
        sampler.start()
        threading.Thread(target=_change_capacity, daemon=True, args=(
            gemini, began, capacity_plan(args.capacity), stop)).start()

        def ask(index: int) -> Ended:
            time.sleep(max(0.0, began + index * args.spread / args.runs - time.monotonic()))
            return _follow(state.api_url, agent, text, deadline)

        with ThreadPoolExecutor(max_workers=args.runs) as pool:
            ended = list(pool.map(ask, range(args.runs)))
        wall = time.monotonic() - began
        stop.set()
        sampler.join(5.0)
        gemini_stats = httpx.get(f"{gemini}/_admin/stats").json()
        return figures(args, ended, samples, gemini_stats, stack.push_stats(), wall)
    finally:
        stack.down()


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    out.add_argument("--runs", type=int, default=40)
    out.add_argument("--calls", type=int, default=5, help="model calls per run (>= 2)")
    out.add_argument("--rpm", type=int, default=60,
                     help="the quota: requests a minute (0: not limited)")
    out.add_argument("--tpm", type=int, default=0,
                     help="the quota: input tokens a minute (0: not limited)")
    out.add_argument("--pad", type=int, default=0,
                     help="words each tool call returns (reference-padded): longer prompts")
    out.add_argument("--spread", type=float, default=60.0, help="seconds the asks spread over")
    out.add_argument("--rounding", choices=["floor", "ceil"], default="floor",
                     help="retryDelay's rounding: floor as Gemini ('0s'), or ceil")
    out.add_argument("--style", choices=["gemini-api", "vertex"], default="gemini-api",
                     help="how the server's 429 reads: with a RetryInfo delay, or Vertex AI's "
                     "shared pool's, with none")
    out.add_argument("--limiter", choices=["off", "fixed", "adaptive"], default="off",
                     help="the stack's model quota: --rpm less --headroom (off: none)")
    out.add_argument("--headroom", type=float, default=0.02)
    out.add_argument("--capacity", default="",
                     help="what the server allows as the runs go: RPM@SECONDS,...")
    out.add_argument("--timeout", type=float, default=900.0,
                     help="seconds a run may take after the last ask")
    out.add_argument("--workdir", type=Path, default=None)
    out.add_argument("--json", type=Path, default=None)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.calls < 2 or args.runs < 1 or (args.rpm < 1 and args.tpm < 1):
        print("error: --calls must be >= 2, --runs >= 1, and --rpm or --tpm >= 1",
              file=sys.stderr)
        return 2
    found = run(args)
    return printed(found, args.json)


if __name__ == "__main__":
    sys.exit(main())
