"""Paid model calls at a fan-in, counted where Gemini would bill them.

``python -m ackloop_dev.bench.fan_in [--runs 20] [--workdir DIR] [--json FILE]``

A local stack (emulators, every ``ackloop run`` function, the push delivery at production's
timing, the sweeper as deployed) whose model is the real google-genai client against the fake
Gemini server, which counts every request it receives. Two workloads
(:mod:`ackloop_dev.bench.fan_in_agents`), each ``--runs`` runs at once through ``POST /runs``:

- ``fan-in``: each question is answered with two parallel function calls, then with text (two
  tool steps finish together; one of them must trigger the next model step);
- ``research-team``: a planner asks two sub-agents at once (two child runs end together), then
  hands off to a writer.

For each it prints the model requests the server received against the model calls the runs
recorded (their usage, children included): every request above that count is a paid call the
ledger does not show. Nothing is injected: the only duplicates are the engine's own and
Pub/Sub's (rare on the local push delivery).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from ackloop_dev.bench.stack_runs import asked_at_once, free_stack

AGENTS = "ackloop_dev.bench.fan_in_agents:agents"
WORKLOADS = {
    "fan-in": "What are the price and the stock of item {n}?",
    "research-team": "Should a small team adopt durable agents for job {n}?",
}


@dataclass(frozen=True)
class Figures:
    workload: str
    runs: int
    answered: int
    model_requests: int
    recorded_model_calls: int
    seconds: float

    @property
    def extra(self) -> int:
        return self.model_requests - self.recorded_model_calls


def _recorded(view: dict[str, Any]) -> int:
    """The run's model calls, its child runs' included (``usage.children`` is their part)."""
    return int((view.get("usage") or {}).get("model_calls") or 0)


def measure(api: str, gemini: str, workload: str, runs: int) -> Figures:
    """``runs`` runs of ``workload`` at once; the server's requests against what they recorded."""
    before = int(httpx.get(f"{gemini}/_admin/stats").json()["requests"])
    seconds, views = asked_at_once(
        api, [(workload, WORKLOADS[workload].format(n=n)) for n in range(runs)], 300.0)
    time.sleep(2.0)  # a duplicate still calling is counted too
    after = int(httpx.get(f"{gemini}/_admin/stats").json()["requests"])
    return Figures(workload, runs, sum(v.get("status") == "completed" for v in views),
                   after - before, sum(_recorded(v) for v in views), round(seconds, 2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    directory = args.workdir or Path(tempfile.mkdtemp(prefix="ackloop-fan-in-"))
    stack = free_stack(directory, "ackloop-fan-in", AGENTS, fake_gemini=True)
    state = stack.up(log=lambda line: print(line, file=sys.stderr))
    try:
        assert state.fake_gemini_url is not None
        results = [measure(state.api_url, state.fake_gemini_url, name, args.runs)
                   for name in WORKLOADS]
    finally:
        stack.down()
    print(f"{'workload':<15} {'runs':>5} {'answered':>9} {'model requests':>15} "
          f"{'recorded calls':>15} {'extra':>6} {'seconds':>8}")
    for f in results:
        print(f"{f.workload:<15} {f.runs:>5} {f.answered:>9} {f.model_requests:>15} "
              f"{f.recorded_model_calls:>15} {f.extra:>6} {f.seconds:>8.2f}")
    if args.json:
        args.json.write_text(json.dumps([asdict(f) | {"extra": f.extra} for f in results],
                                        indent=2))
    return 0 if all(f.answered == f.runs for f in results) else 1


if __name__ == "__main__":
    sys.exit(main())
