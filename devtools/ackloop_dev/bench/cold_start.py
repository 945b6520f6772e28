"""The cold start of each service, and one run on just-started functions against a warm run.

``python -m ackloop_dev.bench.cold_start`` (with ``PUBSUB_EMULATOR_HOST`` and
``FIRESTORE_EMULATOR_HOST`` set to running emulators) prints, for every ``FUNCTION_TARGET`` a
deployment layout deploys (``steps``, the default's one service for every step kind; each step
kind's own; ``api``):

* ``import``: CPU and wall of a fresh interpreter importing what serves the target (the
  function's module and app as ``ackloop run`` loads them, after what it does first:
  :func:`ackloop.cli.serving.prepare`; the API's app), interpreter start included;
* ``deps``: the same process once it has also built its dependencies
  (:func:`ackloop.hosting.runtime.process_deps`: settings, catalog, model, Firestore, Pub/Sub,
  httpx);
* ``serve``: ``ackloop run`` (the container's entrypoint) from spawn until its port answered
  its first request, and the CPU the process used by then.

The scripted model is configured unless ``--gemini`` configures Gemini (never called), as
deployed.

Then, on a stack of its own (``ackloop_dev.bench.ackloop_stack``, the scripted instant model,
the push delivery), the same reference run end to end (ingest -> model -> tool -> model ... ->
answer) on warm processes, and on step functions just restarted and ready (the first request
each one serves), with the sum of their cold starts: what a run pays when each step's service
starts from zero in series. CPU figures are process CPU (user + system), so other load on the
machine stretches the wall figures, not the CPU ones. The project's modules are compiled to
bytecode first, as the image has them (:mod:`ackloop_dev.bench.bytecode`; ``--no-compile``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ackloop_dev.bench import bytecode

TARGETS = ("steps", "ingest", "model_step", "tool_step", "dead_letter", "api")
"""The services of both deployment layouts: ``steps`` (every step kind, the default) and the api;
a service per step kind and the api (``per_step``)."""

# Run in a fresh interpreter: nothing of this module (nor the development tools) is imported
# there, so the figures are the target's alone. Prints one JSON line.
PROBE = """
import asyncio, json, resource, sys, time
from pathlib import Path
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
began = time.perf_counter()
target = sys.argv[1]
try:  # what ackloop run does first (a version without it: for a before/after)
    from ackloop.cli.serving import prepare
except ImportError:
    pass
else:
    prepare()
if target == "api":
    from ackloop.api.app import create_app
    create_app()
else:
    try:
        from ackloop.hosting.function_app import function_app, load_function
    except ImportError:  # a version served by functions-framework (for a before/after)
        from functions_framework.aio import create_asgi_app
        create_asgi_app(target, str(Path("functions", target, "main.py")))
    else:
        try:  # every step kind's module for a combined target (steps)
            from ackloop.cli.serving import function_sources
        except ImportError:
            sources = {target: Path("functions", target, "main.py")}
        else:
            sources = function_sources(target, Path("functions"))
        for kind, source in sources.items():
            function_app(load_function(kind, source))
figures = {"import_cpu_s": cpu(), "import_wall_s": time.perf_counter() - began,
           "import_modules": len(sys.modules)}
from ackloop.hosting import runtime
getattr(runtime, "serve_target", lambda target: None)(target)
asyncio.run(runtime.process_deps())
try:
    from ackloop.hosting import gcstart
except ImportError:
    pass
else:
    gcstart.resume()
figures |= {"deps_cpu_s": cpu(), "deps_wall_s": time.perf_counter() - began,
            "deps_modules": len(sys.modules)}
print(json.dumps(figures))
"""


@dataclass(frozen=True)
class Served:
    """``ackloop run`` from spawn to its first answered request."""

    wall_s: float
    cpu_s: float


def probe(target: str, env: Mapping[str, str], root: Path) -> dict[str, float]:
    """Import (and deps) figures of ``target`` in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", PROBE, target], env=dict(env), cwd=root,
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{target} probe failed: {done.stderr.strip()[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def health_path(target: str) -> str:
    """What a start-up check GETs: the API's health route, a function's root."""
    return "healthz" if target == "api" else ""


def serve_once(target: str, env: Mapping[str, str], root: Path, port: int,
               timeout_s: float = 60.0) -> Served:
    """Spawn ``ackloop run`` for ``target``, wait until its port answers, stop it."""
    from ackloop_dev.bench.procstats import tree_cpu_seconds
    from ackloop_dev.devstack.processes import stop_pid
    from ackloop_dev.devstack.stack import ackloop_command

    url = f"http://127.0.0.1:{port}/{health_path(target)}"
    child_env = {**env, "FUNCTION_TARGET": target, "PORT": str(port), "ACKLOOP_HOST": "127.0.0.1"}
    began = time.monotonic()
    process = subprocess.Popen([*ackloop_command(), "run"], env=child_env, cwd=root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{target} exited with {process.returncode} at start-up")
            try:
                if httpx.get(url, timeout=5).is_success:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() - began > timeout_s:
                raise RuntimeError(f"{target} did not serve in {timeout_s:.0f} s")
            time.sleep(0.01)
        return Served(round(time.monotonic() - began, 3), round(tree_cpu_seconds(process.pid), 3))
    finally:
        stop_pid(process.pid)
        process.wait(timeout=10)


def median_of(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The per-key median of ``samples`` (each a dict of the same figures), rounded to ms."""
    keys = samples[0].keys() if samples else []
    return {k: round(statistics.median(s[k] for s in samples), 3) for k in keys}


def per_target(target: str, env: Mapping[str, str], root: Path, repeats: int) -> dict[str, float]:
    """Medians over ``repeats`` of a target's import, deps and serve figures."""
    from ackloop_dev.devstack.emulators import free_port

    probes = [probe(target, env, root) for _ in range(repeats)]
    served = [serve_once(target, env, root, free_port()) for _ in range(repeats)]
    return {**median_of(probes),
            **median_of([{"serve_wall_s": s.wall_s, "serve_cpu_s": s.cpu_s} for s in served])}


def run_figures(warm: Sequence[float], cold: Sequence[float],
                restarts: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """The run figures: warm and first-on-fresh-processes medians, and the serial estimate
    (the cold run plus, for each step function, its median spawn-to-ready seconds)."""
    serial = sum(statistics.median(s) for s in restarts.values())
    cold_median = statistics.median(cold)
    return {"warm_run_s": round(statistics.median(warm), 3),
            "first_run_on_fresh_processes_s": round(cold_median, 3),
            "step_cold_starts_s": round(serial, 3),
            "serial_cold_run_estimate_s": round(cold_median + serial, 3)}


async def cold_vs_warm(pubsub: int, firestore: int, repeats: int) -> dict[str, Any]:
    """The reference run on warm processes vs on step functions just restarted (each ready)."""
    from ackloop_dev.bench.ackloop_client import AnswerWatcher, RunDriver
    from ackloop_dev.bench.ackloop_stack import STEP_FUNCTIONS, BenchStack

    with tempfile.TemporaryDirectory(prefix="ackloop-cold-") as directory:
        stack = await asyncio.to_thread(BenchStack.start, Path(directory), log_level="WARNING",
                                        emulator_ports=(pubsub, firestore))
        watcher = AnswerWatcher(stack.settings)
        driver = RunDriver(stack.settings, watcher, 120.0)
        try:
            watcher.start()
            await asyncio.to_thread(stack.use_push_delivery)
            await driver.run_sequence(2)  # warm-up: every process has served a run
            warm, cold = [], []
            restarts: dict[str, list[float]] = {f: [] for f in STEP_FUNCTIONS}
            cpu: dict[str, list[float]] = {f: [] for f in STEP_FUNCTIONS}
            for _ in range(repeats):
                warm.append((await driver.run_once()).seconds)
                for function in STEP_FUNCTIONS:
                    took, used = await asyncio.to_thread(stack.restart, function)
                    restarts[function].append(took)
                    cpu[function].append(used)
                result = await driver.run_once()
                if not result.ok:
                    raise RuntimeError(f"the run on fresh processes failed: {result.error}")
                cold.append(result.seconds)
            # The stack's processes export spans and metrics to files (the SDK is loaded), as
            # deployed processes export them to Google Cloud.
            return {**run_figures(warm, cold, restarts),
                    "restart_s": {f: round(statistics.median(s), 3) for f, s in restarts.items()},
                    "restart_cpu_s": {f: round(statistics.median(s), 3) for f, s in cpu.items()}}
        finally:
            driver.close()
            watcher.stop()
            await asyncio.to_thread(stack.stop)


def table(rows: Mapping[str, Mapping[str, float]]) -> str:
    """A fixed-width table of the per-target figures."""
    columns = ["import_cpu_s", "import_wall_s", "deps_cpu_s", "deps_wall_s", "serve_cpu_s",
               "serve_wall_s", "import_modules", "deps_modules"]
    lines = ["target       " + " ".join(f"{c:>14}" for c in columns)]
    for target, figures in rows.items():
        lines.append(f"{target:<12} " + " ".join(f"{figures.get(c, 0):>14g}" for c in columns))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="samples per figure (median)")
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--no-run", action="store_true", help="skip the cold vs warm run")
    parser.add_argument("--gemini", action="store_true",
                        help="configure Gemini (a placeholder key, never called) for the "
                             "per-target figures, as deployed: the model step builds its client")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    bytecode.add_argument(parser)
    args = parser.parse_args(argv)
    from ackloop_dev.devstack.emulators import required_ports
    from ackloop_dev.devstack.stack import project_root

    ports = required_ports(parser)
    root = project_root()
    if not args.no_compile:
        bytecode.compile_sources(root)
    env = {**os.environ, "ACKLOOP_MODEL_PROVIDER": "scripted",
           "ACKLOOP_PROJECT_ID": os.environ.get("ACKLOOP_PROJECT_ID", "ackloop-cold")}
    if args.gemini:
        env |= {"ACKLOOP_MODEL_PROVIDER": "gemini", "ACKLOOP_GEMINI_API_KEY": "placeholder"}
    rows = {t: per_target(t, env, root, args.repeats) for t in args.targets.split(",")}
    print(table(rows))
    result: dict[str, Any] = {"targets": rows}
    if not args.no_run:
        result["run"] = asyncio.run(cold_vs_warm(ports[0], ports[1], args.repeats))
        print(json.dumps(result["run"], indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
