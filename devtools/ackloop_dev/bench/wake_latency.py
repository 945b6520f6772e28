"""Calls that sleep, on the local stack: what they cost while they sleep, and how late they wake.

``python -m ackloop_dev.bench.wake_latency [--runs 50] [--sleep 8] [--sweep-every 2] [--json F]``

A stack of its own (emulators, every service, the push delivery, the task queue standing in
for Cloud Tasks, the sweeper's scheduler calling ``POST /sweep`` every ``--sweep-every``
seconds, more often than the deployed minute, so that sweeps happen while the calls sleep).
``--runs`` questions to the ``follow-up`` agent are asked at once through ``POST /runs``, each
call sleeping ``--sleep`` seconds. Once every call sleeps, and again just before the first
wake, it counts what the sleeping runs got: pushes to the tool step's subscription, and log
lines naming any of the runs in every process's log. After they end, each call's lateness is
when its tool step ran (``woke_at``) minus its time (``slept_until``); the task queue's own
lateness (task dispatched after its time) is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from ackloop_dev.agents import CATALOG
from ackloop_dev.devstack import emulators
from ackloop_dev.devstack.stack import (
    PUSH_DELIVERY,
    SCHEDULER,
    TASK_QUEUE,
    LocalStack,
    StackOptions,
    isolated_env,
)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float]:
    """Least, median, p99 (nearest rank) and worst of ``values`` (empty: nothing)."""
    if not values:
        return {}
    return {"min": round(min(values), digits), "median": round(statistics.median(values), digits),
            "p99": round(quantile(values, 0.99), digits), "max": round(max(values), digits)}


def lateness_s(view: dict[str, Any]) -> float:
    """How long after its time a run's sleeping call ran (its decision's payload)."""
    (step,) = [s for s in view["steps"] if s["key"] == "0000-tool-000"]
    payload = step["decision"]["payload"]
    woke = datetime.fromisoformat(payload["woke_at"].replace("Z", "+00:00"))
    due = datetime.fromisoformat(payload["slept_until"].replace("Z", "+00:00"))
    return (woke - due).total_seconds()


def log_mentions(logs: Path, run_ids: Sequence[str]) -> int:
    """Lines of every process's log naming one of ``run_ids``."""
    count = 0
    for path in logs.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            count += any(run_id in line for run_id in run_ids)
    return count


def _get(url: str) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(url, timeout=10).json()
    return answer


def snapshot(stack: LocalStack, run_ids: Sequence[str]) -> dict[str, Any]:
    assert stack.state is not None
    ports = stack.state.ports
    push = _get(f"http://127.0.0.1:{ports[PUSH_DELIVERY]}/_stats")
    tool_subscription = stack.settings().tool_steps_topic + "-push"
    return {"at": time.time(),
            "tool_step_pushes": sum(push["subscriptions"][tool_subscription]["answers"].values()),
            "log_lines": log_mentions(stack.directory / "logs", run_ids),
            "sweeps": _get(f"http://127.0.0.1:{ports[SCHEDULER]}/_stats")["calls"],
            "tasks_held": _get(f"http://127.0.0.1:{ports[TASK_QUEUE]}/_stats")["held"]}


def measure(stack: LocalStack, runs: int, sleep_s: float, timeout_s: float) -> dict[str, Any]:
    assert stack.state is not None
    api = stack.state.api_url
    with httpx.Client(base_url=api, timeout=30.0) as http, ThreadPoolExecutor(16) as pool:
        asked = list(pool.map(lambda i: http.post("/runs", json={
            "agent": "follow-up", "text": f"follow up on A-{i} in {sleep_s:g} s"}).json(),
            range(runs)))
        run_ids = [a["run_id"] for a in asked]
        deadline = time.monotonic() + timeout_s

        def views() -> list[dict[str, Any]]:
            return list(pool.map(lambda r: http.get(f"/runs/{r}").json(), run_ids))

        def sleeping(view: dict[str, Any]) -> bool:
            return any(s["key"] == "0000-tool-000" and s["status"] == "waiting"
                       for s in view.get("steps", []))

        while not all(sleeping(v) for v in views()):
            if time.monotonic() > deadline:
                raise TimeoutError("the calls did not all start sleeping")
            time.sleep(0.05)
        asleep = snapshot(stack, run_ids)
        first_wake = min(w["wake_at"] for v in views() for w in v["waiting"])
        time.sleep(max(0.0, first_wake - time.time() - 0.3))
        before_wake = snapshot(stack, run_ids)
        while (ended := views()) and not all(v["status"] == "completed" for v in ended):
            if time.monotonic() > deadline:
                raise TimeoutError("the calls did not all wake and end")
            time.sleep(0.1)
    late = [lateness_s(v) for v in ended]
    dispatch = _get(f"http://127.0.0.1:{stack.state.ports[TASK_QUEUE]}/_stats")["lateness_s"]
    return {
        "runs": runs, "sleep_s": sleep_s,
        "while_asleep": {"seconds": round(before_wake["at"] - asleep["at"], 2),
                         "tool_step_pushes": before_wake["tool_step_pushes"]
                         - asleep["tool_step_pushes"],
                         "log_lines": before_wake["log_lines"] - asleep["log_lines"],
                         "sweeps_made": before_wake["sweeps"] - asleep["sweeps"],
                         "wakes_held": asleep["tasks_held"]},
        "lateness_s": spread(late),
        "task_dispatch_lateness_s": spread(dispatch, 4),
    }


def run(runs: int, sleep_s: float, sweep_every_s: float, timeout_s: float = 300.0,
        emulator_ports: tuple[int, int] | None = None) -> dict[str, Any]:
    """:func:`measure` on a stack of its own (on running emulators when ``emulator_ports``
    names them: its topics and collections are its own)."""
    with tempfile.TemporaryDirectory(prefix="ackloop-wakes-") as directory:
        pubsub, firestore = emulator_ports or (emulators.free_port(), emulators.free_port())
        tag = f"w{uuid.uuid4().hex[:8]}"
        stack = LocalStack(StackOptions(
            directory=Path(directory), project_id="ackloop-wakes", pubsub_port=pubsub,
            firestore_port=firestore, start_emulators=emulator_ports is None, base_port=0,
            sandbox_apis=False, agents=CATALOG, sweep_every_s=sweep_every_s,
            extra_env=isolated_env(tag, "ackloop-wakes")))
        stack.up(log=lambda _: None)
        try:
            return measure(stack, runs, sleep_s, timeout_s)
        finally:
            stack.down()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--sleep", type=float, default=8.0, help="seconds each call sleeps")
    parser.add_argument("--sweep-every", type=float, default=2.0,
                        help="seconds between the scheduler's sweeps")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result = run(args.runs, args.sleep, args.sweep_every)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
