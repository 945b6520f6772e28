"""The ackloop side's processes: both emulators, the four step functions and the push delivery.

The benchmark starts emulators of its own on free ports (so its Firestore starts empty and
their CPU is the benchmark's alone), runs every function through ``ackloop run`` (the
container's entrypoint) with the scripted instant model, and reads each function's counters
from ``GET /``. Pushes are delivered by the local stack's push delivery
(:mod:`ackloop_dev.devstack.push_delivery`, production's concurrency and retry policy), or for
comparison by the emulator's own push loop. Logs go to files under the work directory;
processes are stopped by PID.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ackloop.config.settings import Settings
from ackloop_dev.bench.procstats import tree_cpu_seconds
from ackloop_dev.devstack import emulators
from ackloop_dev.devstack.stack import (
    FUNCTIONS,
    PUSH_DELIVERY,
    LocalStack,
    StackOptions,
    isolated_env,
)
from ackloop_dev.devstack.topology import routes

PROJECT = "ackloop-bench"
STEP_FUNCTIONS = ("ingest", "model_step", "tool_step")


def bench_env(tag: str, log_level: str) -> dict[str, str]:
    """Environment of every function process: unique topics, the scripted model."""
    return {
        **isolated_env(tag, PROJECT),
        "ACKLOOP_MODEL_PROVIDER": "scripted",
        "ACKLOOP_LOG_LEVEL": log_level,
    }


@dataclass
class BenchStack:
    """A running ackloop stack for the benchmark."""

    stack: LocalStack
    settings: Settings
    directory: Path

    @classmethod
    def start(
        cls, directory: Path, *, log_level: str = "INFO",
        emulator_ports: tuple[int, int] | None = None,
    ) -> BenchStack:
        """Start emulators (unless ``emulator_ports`` names running ones), functions and the
        push delivery.

        Raises ``EmulatorsMissing`` without the jars.
        """
        tag = f"b{uuid.uuid4().hex[:8]}"
        env = bench_env(tag, log_level)
        pubsub, firestore = emulator_ports or (emulators.free_port(), emulators.free_port())
        options = StackOptions(
            directory=directory,
            project_id=PROJECT,
            pubsub_port=pubsub,
            firestore_port=firestore,
            start_emulators=emulator_ports is None,
            base_port=0,
            sandbox_apis=False,
            fake_gemini=False,
            extra_env=env,
            services=FUNCTIONS,
        )
        stack = LocalStack(options)
        stack.up(log=lambda *_: None)
        fields = {k.removeprefix("ACKLOOP_").lower(): v for k, v in env.items()
                  if k.startswith("ACKLOOP_") and k != "ACKLOOP_PROJECT_ID"}
        settings = Settings.model_validate({**fields, "ACKLOOP_PROJECT_ID": PROJECT})
        return cls(stack, settings, directory)

    def url(self, function: str) -> str:
        """Base URL of a function process."""
        assert self.stack.state is not None
        return f"http://127.0.0.1:{self.stack.state.ports[function]}/"

    def pid(self, name: str) -> int:
        """PID of a process of the stack (a function or an emulator)."""
        pid = self.stack.processes[name].pid
        assert pid is not None, f"{name} is not running"
        return pid

    def cpu_roles(self) -> dict[str, int]:
        """The process trees whose CPU counts for the ackloop side, by role (the client,
        this process, is measured without its children)."""
        roles = {name: self.pid(name) for name in STEP_FUNCTIONS}
        for role in ("pubsub-emulator", "firestore-emulator"):
            if role in self.stack.processes:
                roles[role.replace("-", "_")] = self.pid(role)
        if PUSH_DELIVERY in self.stack.processes:
            roles["push_delivery"] = self.pid(PUSH_DELIVERY)
        return roles

    def _routes(self) -> dict[str, str]:
        endpoints = {name: self.url(name) for name in FUNCTIONS}
        return {r.subscription: r.endpoint for r in routes(self.settings, endpoints)}

    def use_push_delivery(self) -> None:
        """Deliver pushes with the push delivery (it takes the subscriptions over from the
        emulator's own push; ready once it has)."""
        if PUSH_DELIVERY not in self.stack.processes:
            self.stack.start_push_delivery().wait_ready(60.0)

    def use_emulator_push(self) -> None:
        """Stop the push delivery and let the emulator push again."""
        from google.cloud import pubsub_v1  # type: ignore[attr-defined]

        self.stack.stop_push_delivery()
        subscriber = pubsub_v1.SubscriberClient()
        try:
            for name, url in self._routes().items():
                subscriber.modify_push_config(
                    subscription=subscriber.subscription_path(self.settings.project_id, name),
                    push_config={"push_endpoint": url},
                )
        finally:
            subscriber.close()

    def push_stats(self) -> dict[str, Any] | None:
        """The push delivery's ``GET /_stats`` (pushes by HTTP answer, per subscription), or
        None while the emulator pushes itself (it counts nothing)."""
        if PUSH_DELIVERY not in self.stack.processes:
            return None
        return self.stack.push_stats()

    def counters(self) -> dict[str, dict[str, Any]]:
        """Each step function's ``GET /`` counters: Firestore, publishes, deliveries."""
        return {name: httpx.get(self.url(name), timeout=10).json() for name in STEP_FUNCTIONS}

    def restart(self, function: str) -> tuple[float, float]:
        """Kill ``function`` and start it again.

        Returns the seconds from spawn to its first served request and the CPU seconds the new
        process used by then (the work of a cold start, whatever else the machine is doing). The
        first request (``GET /``) builds the process's clients, so this is the whole cold start:
        interpreter, imports, dependencies.
        """
        self.stack.processes[function].kill()  # a crash: the cold start is what follows
        began = time.monotonic()
        self.stack.start_service(function).wait_ready(60.0)
        took = time.monotonic() - began
        return took, tree_cpu_seconds(self.pid(function))

    def stop(self) -> None:
        """Stop every process of the stack, by PID."""
        self.stack.down()
