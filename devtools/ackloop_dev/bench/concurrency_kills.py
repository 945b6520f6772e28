"""A concurrency limit under SIGKILL: does it hold at every instant, does a dead holder's slot
free, does any leak?

``python -m ackloop_dev.bench.concurrency_kills [--runs 30] [--calls 3] [--limit 2]
[--call-seconds 1.5] [--kill-every 12] [--timeout 600] [--json F]``

Starts a local stack on free ports with one concurrency limit, at most ``--limit`` model steps
at once per owner (``ACKLOOP_CONCURRENCY_LIMITS``; every run here has one owner), and a fake
Gemini server (the real google-genai client over HTTP) that takes ``--call-seconds`` to answer
each call. It asks ``--runs`` runs of the ``reference-long`` agent, ``--calls`` model calls each,
all at once, and SIGKILLs the model step's process (with its workers) every ``--kill-every``
seconds while runs are unfinished, starting it again at once; Pub/Sub's redelivery brings back
what it held. Every 50 ms it samples the calls the model server is answering and the owner's
slots document (``slots/``). It prints, and writes as JSON:

- the limit: the most model calls answered at once as the model server counted them (its own
  exact count, ``in_flight_max``) and the most live holders of the slots in any sample;
- the kills: when, the holders the killed process held then, and for each, the seconds until
  its slot was free again (its entry gone, or its lease over, or taken again by a live
  delivery of the same step, which renews it);
- the end: runs completed, failed, unfinished; holders and waiters left in the slots once
  every run ended (a leak), and the model calls made against the calls the runs needed.

No figure is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.store import AgentStore
from ackloop_dev.agents import CATALOG
from ackloop_dev.bench.printed import printed
from ackloop_dev.bench.quota_workload import AGENT, Ended, _follow
from ackloop_dev.bench.stack_runs import free_stack

SAMPLE_S = 0.05


@dataclass
class Kill:
    at: float
    held: dict[str, float]
    """The holders the killed process held (name -> lease end) at the kill."""
    freed_after_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Watch:
    most_holders: int = 0
    most_calls_sampled: int = 0
    samples: int = 0
    kills: list[Kill] = field(default_factory=list)
    holders: dict[str, float] = field(default_factory=dict)
    """The live holders in the last sample: name -> lease end."""


def _live(doc: dict[str, Any] | None, now: float) -> dict[str, float]:
    return {str(h["name"]): float(h["until"]) for h in (doc or {}).get("holders") or []
            if float(h["until"]) > now}


def _freed(kill: Kill, holders: dict[str, float], now: float) -> None:
    """Note the slots the kill left held that are free (or renewed by a live delivery) now."""
    for name, until in kill.held.items():
        if name in kill.freed_after_s:
            continue
        if name not in holders or holders[name] > until:
            kill.freed_after_s[name] = round(now - kill.at, 2)


async def _sample(store: AgentStore, gemini: str, watch: Watch, stop: threading.Event) -> None:
    async with httpx.AsyncClient(timeout=5.0) as http:
        while not stop.is_set():
            now = time.time()
            docs = await store.quotas.listed("slots")
            holders: dict[str, float] = {}
            for _, doc in docs:
                holders |= _live(doc, now)
            stats = (await http.get(f"{gemini}/_admin/stats")).json()
            watch.samples += 1
            watch.most_holders = max(watch.most_holders, len(holders))
            watch.most_calls_sampled = max(watch.most_calls_sampled, stats["in_flight"])
            watch.holders = holders
            for kill in watch.kills:
                _freed(kill, holders, now)
            await asyncio.sleep(SAMPLE_S)


def _kill_tree(pid: int) -> None:
    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)


def _killer(stack: Any, watch: Watch, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        process = stack.processes["model_step"]
        if process.pid is None:
            continue
        held = dict(watch.holders)
        _kill_tree(process.pid)
        watch.kills.append(Kill(time.time(), held))
        process.process.wait(10)
        stack.restart_service("model_step")


def run(args: argparse.Namespace) -> dict[str, Any]:
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="ackloop-kills-"))
    limits = [{"steps": "model", "key": "owner", "limit": args.limit}]
    stack = free_stack(directory, "ackloop-kills", CATALOG, fake_gemini=True,
                       extra_env={"ACKLOOP_CONCURRENCY_LIMITS": json.dumps(limits)})
    state = stack.up(log=lambda line: print(line, file=sys.stderr))
    try:
        gemini = state.fake_gemini_url
        assert gemini is not None
        httpx.post(f"{gemini}/_admin/faults", json={
            "fault_rate": 1.0, "fault_kinds": f"delay:{args.call_seconds}"}).raise_for_status()
        os.environ.update(state.client_env())
        store = AgentStore(FirestoreDocumentDB.connect(state.project_id),
                           state.env.get("ACKLOOP_COLLECTION_PREFIX", ""))
        watch, stop = Watch(), threading.Event()
        sampler = threading.Thread(target=lambda: asyncio.run(_sample(store, gemini, watch,
                                                                      stop)), daemon=True)
        sampler.start()
        killer = threading.Thread(target=_killer, args=(stack, watch, args.kill_every, stop),
                                  daemon=True)
        killer.start()
        began = time.monotonic()
        deadline = began + args.timeout
        text = f"look up calls={args.calls - 1}"
        with ThreadPoolExecutor(max_workers=args.runs) as pool:
            ended = list(pool.map(lambda _: _follow(state.api_url, AGENT, text, deadline),
                                  range(args.runs)))
        wall = time.monotonic() - began
        stop.set()
        killer.join(30.0)
        sampler.join(5.0)
        time.sleep(1.0)
        left = asyncio.run(_left(state.project_id,
                                 state.env.get("ACKLOOP_COLLECTION_PREFIX", "")))
        stats = httpx.get(f"{gemini}/_admin/stats").json()
        return figures(args, ended, watch, stats, left, wall)
    finally:
        stack.down()


async def _left(project_id: str, prefix: str) -> dict[str, int]:
    store = AgentStore(FirestoreDocumentDB.connect(project_id), prefix)
    now = time.time()
    docs = await store.quotas.listed("slots")
    return {"holders": sum(len(_live(doc, now)) for _, doc in docs),
            "in_line": sum(len([w for w in doc.get("line") or []
                                if float(w.get("until", 0)) > now]) for _, doc in docs)}


def figures(args: argparse.Namespace, ended: list[Ended], watch: Watch, stats: dict[str, Any],
            left: dict[str, int], wall: float) -> dict[str, Any]:
    freed = [s for kill in watch.kills for s in kill.freed_after_s.values()]
    never = sum(len(kill.held) - len(kill.freed_after_s) for kill in watch.kills)
    statuses = [e.status for e in ended]
    return {
        "workload": {"runs": args.runs, "model_calls_per_run": args.calls,
                     "limit_per_owner": args.limit, "call_seconds": args.call_seconds,
                     "kill_every_s": args.kill_every},
        "limit": {"most_calls_at_once_at_the_model": stats["in_flight_max"],
                  "most_calls_at_once_sampled": watch.most_calls_sampled,
                  "most_live_holders_sampled": watch.most_holders,
                  "samples": watch.samples},
        "kills": {"count": len(watch.kills),
                  "holders_killed": sum(len(k.held) for k in watch.kills),
                  "freed_after_s_max": max(freed, default=None),
                  "freed_after_s": sorted(freed),
                  "never_freed": never},
        "end": {"completed": statuses.count("completed"), "failed": statuses.count("failed"),
                "unfinished": statuses.count("unfinished"),
                "errors": sorted({e.error or "" for e in ended if e.status == "failed"}),
                "slots_left": left,
                "model_calls_answered": stats["answered"],
                "model_calls_needed": args.runs * args.calls},
        "wall_s": round(wall, 1),
    }


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    out.add_argument("--runs", type=int, default=30)
    out.add_argument("--calls", type=int, default=3, help="model calls per run (>= 2)")
    out.add_argument("--limit", type=int, default=2, help="model steps at once per owner")
    out.add_argument("--call-seconds", type=float, default=1.5,
                     help="seconds the model server takes to answer each call")
    out.add_argument("--kill-every", type=float, default=12.0,
                     help="seconds between SIGKILLs of the model step's process")
    out.add_argument("--timeout", type=float, default=600.0)
    out.add_argument("--workdir", type=Path, default=None)
    out.add_argument("--json", type=Path, default=None)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    found = run(args)
    return printed(found, args.json)


if __name__ == "__main__":
    sys.exit(main())
