"""A question that finds every service scaled to zero, against one that finds them warm.

``python -m ackloop_dev.bench.cold_query [--samples 5] [--layouts steps,per-step] [--json F]``
(with ``PUBSUB_EMULATOR_HOST`` and ``FIRESTORE_EMULATOR_HOST`` set to running emulators; the
figures are also a part of ``ackloop bench``).

Each service of the deployment layout runs only while used
(:mod:`ackloop_dev.devstack.scale_to_zero`: a process started when a push arrives and none
runs, the push held until it accepts, as Cloud Run does with no minimum instance). A sample
stops every process, publishes the reference question (model -> tool -> model -> tool ->
model) to the queries topic as a user does, and times it until its answer is received from the
answers topic (``cold``); then asks it again on the processes the first one started
(``warm``). The layouts (``docs/deployment-layouts.md``):

* ``steps``: one service serving every step kind (``FUNCTION_TARGET=steps``), each push
  subscription's endpoint naming its kind, the default deployment: a cold question starts one;
* ``per-step``: a service per step kind (``ingest``, ``model_step``, ``tool_step``,
  ``dead_letter``): a cold question starts three, one after another.

The model is the real google-genai client against the local Gemini-compatible server playing
the agent's script (``--scripted``: the scripted model, no client), so a cold model step pays
for the client as deployed. The project's modules are compiled to bytecode first, as the image
has them. Process CPU is reported next to wall time: other load on the machine stretches the
wall figures, not the CPU ones.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ackloop.bus.delivery import load_policy
from ackloop.cli.serving import COMBINED, STEP_KINDS
from ackloop.config.settings import Settings
from ackloop_dev.bench import bytecode
from ackloop_dev.bench.ackloop_client import AnswerWatcher, RunDriver
from ackloop_dev.bench.ackloop_stack import PROJECT, bench_env
from ackloop_dev.devstack.emulators import free_port, required_ports
from ackloop_dev.devstack.processes import ManagedProcess
from ackloop_dev.devstack.scale_to_zero import ScaledService
from ackloop_dev.devstack.stack import LocalStack, StackOptions, ackloop_command, project_root

LAYOUTS: dict[str, dict[str, str]] = {
    "steps": {"steps": "steps"},
    "per-step": {kind: kind for kind in STEP_KINDS},
}
"""Each layout's services: service name -> the ``FUNCTION_TARGET`` it runs; the default
deployment's (infra/layout.tf) first."""


def endpoint_paths(layout: str) -> dict[str, tuple[str, str]]:
    """Each step kind's push endpoint in ``layout``: (service, path)."""
    services = LAYOUTS[layout]
    return {kind: (kind, "") if kind in services else (_serving(services, kind), kind)
            for kind in STEP_KINDS}


def _serving(services: Mapping[str, str], kind: str) -> str:
    return next(name for name, target in services.items()
                if kind in COMBINED.get(target, ()))


def request_timeout_s(target: str) -> float:
    """A service's request timeout, as deployed: its step kind's, or the longest of the kinds
    a combined service serves."""
    timeouts = load_policy().request_timeout_s
    return max(timeouts[kind] for kind in COMBINED.get(target, (target,)))


class _ScaledStack(LocalStack):
    """The local stack with its push endpoints at the scaled services, nothing started."""

    def __init__(self, options: StackOptions, endpoints: dict[str, str]) -> None:
        super().__init__(options)
        self._scaled_endpoints = endpoints

    def endpoints(self) -> dict[str, str]:
        return dict(self._scaled_endpoints)


@dataclass(frozen=True)
class Sample:
    cold_s: float
    warm_s: float
    starts: dict[str, tuple[float, float]]
    """Each service started by the cold question: (seconds to accept, CPU seconds by then)."""


def summary(samples: Sequence[Sample]) -> dict[str, Any]:
    """Medians (and worst) of the samples of one layout."""
    cold = [s.cold_s for s in samples]
    warm = [s.warm_s for s in samples]
    started = [len(s.starts) for s in samples]
    per_service: dict[str, list[tuple[float, float]]] = {}
    for sample in samples:
        for name, start in sample.starts.items():
            per_service.setdefault(name, []).append(start)
    return {
        "cold_s": round(statistics.median(cold), 3),
        "cold_max_s": round(max(cold), 3),
        "warm_s": round(statistics.median(warm), 3),
        "cold_over_warm": round(statistics.median(cold) / statistics.median(warm), 1),
        "services_started_per_cold_query": statistics.median(started),
        "start_s": {n: round(statistics.median(t for t, _ in v), 3)
                    for n, v in per_service.items()},
        "start_cpu_s": {n: round(statistics.median(c for _, c in v), 3)
                        for n, v in per_service.items()},
        "samples": len(samples),
    }


async def measure_layout(layout: str, emulators: tuple[int, int], samples: int,
                         directory: Path, *, scripted: bool = False,
                         log: Callable[[str], object] = lambda _: None) -> dict[str, Any]:
    """``samples`` cold and warm reference questions on ``layout``'s scaled services."""
    env = bench_env(f"c{uuid.uuid4().hex[:8]}", "WARNING")
    if not scripted:  # the client as deployed, against the local Gemini-compatible server
        env.pop("ACKLOOP_MODEL_PROVIDER")
    listen = {name: free_port() for name in LAYOUTS[layout]}
    endpoints = {kind: f"http://127.0.0.1:{listen[service]}/{path}"
                 for kind, (service, path) in endpoint_paths(layout).items()}
    options = StackOptions(directory=directory, project_id=PROJECT, pubsub_port=emulators[0],
                           firestore_port=emulators[1], start_emulators=False, base_port=0,
                           sandbox_apis=False, fake_gemini=not scripted, extra_env=env,
                           services=())
    stack = _ScaledStack(options, endpoints)
    await asyncio.to_thread(stack.up, lambda _: None)
    services = [ScaledService(name, port, backend, _process_maker(stack, name, target, backend))
                for (name, target), port, backend in
                ((item, listen[item[0]], free_port()) for item in LAYOUTS[layout].items())]
    fields = {k.removeprefix("ACKLOOP_").lower(): v for k, v in env.items()
              if k.startswith("ACKLOOP_") and k != "ACKLOOP_PROJECT_ID"}
    settings = Settings.model_validate({**fields, "ACKLOOP_PROJECT_ID": PROJECT})
    watcher = AnswerWatcher(settings)
    driver = RunDriver(settings, watcher, 120.0)
    try:
        for service in services:
            await service.listen()
        watcher.start()
        await driver.run_sequence(2)  # the emulators' and the client's own first use
        measured: list[Sample] = []
        for _ in range(samples):
            for service in services:
                await service.scale_to_zero()
            before = {s.name: len(s.cold_starts) for s in services}
            cold, warm = await driver.run_once(), await driver.run_once()
            for result in (cold, warm):
                if not result.ok:
                    raise RuntimeError(f"{layout}: a reference question failed: {result.error}")
            starts = {s.name: (s.cold_starts[-1].seconds, s.cold_starts[-1].cpu_s)
                      for s in services if len(s.cold_starts) > before[s.name]}
            measured.append(Sample(cold.seconds, warm.seconds, starts))
            log(f"  {layout}: cold {cold.seconds:.2f} s, warm {warm.seconds:.2f} s, "
                f"started {', '.join(starts)}")
        return summary(measured)
    finally:
        driver.close()
        watcher.stop()
        for service in services:
            await service.close()
        await asyncio.to_thread(stack.down)


def _process_maker(stack: LocalStack, name: str, target: str,
                   port: int) -> Callable[[], ManagedProcess]:
    def make() -> ManagedProcess:
        assert stack.state is not None
        env = {**os.environ, **stack.state.env, **stack.project_env(),
               "ACKLOOP_REQUEST_TIMEOUT_SECONDS": f"{request_timeout_s(target):g}",
               "FUNCTION_TARGET": target, "PORT": str(port), "ACKLOOP_HOST": "127.0.0.1"}
        return ManagedProcess(name, [*ackloop_command(), "run"],
                              stack.directory / "logs" / f"{name}.log", env=env,
                              cwd=project_root())

    return make


async def measure(emulators: tuple[int, int], samples: int, layouts: Sequence[str],
                  *, scripted: bool = False,
                  log: Callable[[str], object] = lambda _: None) -> dict[str, Any]:
    """Every layout's figures, and how much faster a cold question is on each than on the
    first (the default layout)."""
    result: dict[str, Any] = {"layouts": {}, "model": "scripted" if scripted else
                              "google-genai against the local Gemini-compatible server"}
    with tempfile.TemporaryDirectory(prefix="ackloop-coldq-") as directory:
        for layout in layouts:
            result["layouts"][layout] = await measure_layout(
                layout, emulators, samples, Path(directory) / layout, scripted=scripted,
                log=log)
    first = result["layouts"][layouts[0]]["cold_s"]
    for figures in result["layouts"].values():
        figures["cold_vs_first_layout"] = round(figures["cold_s"] / first, 2)
    return result


NO_STORAGE = ("STORAGE_EMULATOR_HOST", "ACKLOOP_FILES_BUCKET")
"""What the stacks of :func:`measure_on_own_emulators` run without: the questions carry no
file, and their services keep files in memory."""


async def measure_on_own_emulators(samples: int, layouts: Sequence[str], workdir: Path | None,
                                   log: Callable[[str], object] = lambda _: None
                                   ) -> dict[str, Any]:
    """:func:`measure` on emulators started for it (on free ports) and stopped after."""
    from ackloop_dev.devstack import emulators

    jars = emulators.find_jars()
    with tempfile.TemporaryDirectory(prefix="ackloop-coldq-emu-") as scratch:
        logs = workdir / "emulators" if workdir else Path(scratch)
        ports = (free_port(), free_port())
        started = [emulators.pubsub_process(jars, ports[0], logs).start(),
                   emulators.firestore_process(jars, ports[1], logs).start()]
        try:
            for process in started:
                process.wait_ready(60.0)
            hosts = {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{ports[0]}",
                     "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{ports[1]}"}
            saved = {name: os.environ.get(name) for name in (*hosts, *NO_STORAGE)}
            os.environ.update(hosts)
            for name in NO_STORAGE:  # a storage emulator named before (say, by a stack the
                os.environ.pop(name, None)  # bench ran and stopped) is none of these stacks'
            try:
                bytecode.compile_sources(project_root())
                return await measure(ports, samples, layouts, log=log)
            finally:
                for name, value in saved.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
        finally:
            for process in started:
                process.stop()


def table(result: Mapping[str, Any]) -> str:
    lines = [f"{'layout':<10} {'cold s':>8} {'worst':>7} {'warm s':>8} {'cold/warm':>10} "
             f"{'started':>8}  start s (CPU s) per service"]
    for layout, f in result["layouts"].items():
        starts = ", ".join(f"{n} {s:.2f} ({f['start_cpu_s'][n]:.2f})"
                           for n, s in f["start_s"].items())
        lines.append(f"{layout:<10} {f['cold_s']:>8.2f} {f['cold_max_s']:>7.2f} "
                     f"{f['warm_s']:>8.3f} {f['cold_over_warm']:>10.1f} "
                     f"{f['services_started_per_cold_query']:>8g}  {starts}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=5, help="cold/warm pairs per layout")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--scripted", action="store_true",
                        help="the scripted model instead of google-genai and the local server")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    bytecode.add_argument(parser)
    args = parser.parse_args(argv)
    ports = required_ports(parser)
    if not args.no_compile:
        bytecode.compile_sources(project_root())
    layouts = [name for name in args.layouts.split(",") if name]
    unknown = [name for name in layouts if name not in LAYOUTS]
    if unknown:
        parser.error(f"unknown layout(s) {', '.join(unknown)}: choose from {', '.join(LAYOUTS)}")
    result = asyncio.run(measure(ports, args.samples, layouts, scripted=args.scripted,
                                 log=lambda m: print(m, file=sys.stderr)))
    print(table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
