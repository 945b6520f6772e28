"""The stack a chaos run drives, and its fault hooks.

It is :class:`~ackloop_dev.devstack.stack.LocalStack` (emulators, sandbox APIs, every function and
the API run by ``ackloop run``, the shipped topology and dead-letter policy, the sweep job
POSTing the API's ``/sweep`` on production's schedule) delivered by the local push delivery with
production's retry policy (``LocalStack.start_push_delivery``), all at the run's time factor,
plus three processes of its own: the fake Gemini server with a ledger
(:mod:`ackloop_dev.chaos.model_server`), a second sandbox that serves ip-api (so its timeouts can be
set apart from weather.gov's 500s) and the duplicating front (:mod:`ackloop_dev.chaos.proxy`), which
the push delivery's routes point at. Every function gets the shipped settings with their
durations scaled (:class:`~ackloop_dev.chaos.timing.Timing`). The model and tool functions start
with every fault point of their kind configured but disarmed (marker files present);
:meth:`ChaosStack.arm` removes one marker so the next step that reaches that point SIGKILLs its
process.
"""

from __future__ import annotations

import json
import os
import secrets
import string
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from google.cloud import pubsub_v1  # type: ignore[attr-defined,unused-ignore]

from ackloop.config.settings import Settings
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.store import AgentStore
from ackloop.testing.localstack import StackState
from ackloop_dev.chaos.config import ChaosConfig, scaled_spec
from ackloop_dev.chaos.timing import Timing
from ackloop_dev.devstack import emulators
from ackloop_dev.devstack.processes import ManagedProcess
from ackloop_dev.devstack.stack import (
    FUNCTIONS,
    SCHEDULER,
    SERVICES,
    LocalStack,
    StackOptions,
    isolated_env,
)
from ackloop_dev.faults import KNOWN_POINTS

NOT_DUPLICATED = ("dead_letter",)
"""Functions the duplicating front never sends a second copy to."""


def canary_key() -> str:
    """A fresh fake API key shaped like a Google one: it must never show up in logs or prompts."""
    alphabet = string.ascii_letters + string.digits
    return "AIza" + "".join(secrets.choice(alphabet) for _ in range(35))


def marker_name(point: str) -> str:
    """The marker file :class:`~ackloop_dev.faults.FaultPoints` uses for ``point``."""
    return point.replace(":", "_")


@dataclass
class Emulators:
    """Where the emulators listen; ``start`` False means they are already running."""

    pubsub_port: int
    firestore_port: int
    start: bool

    @classmethod
    def from_environment(cls) -> Emulators:
        """Reuse ``PUBSUB_EMULATOR_HOST``/``FIRESTORE_EMULATOR_HOST`` if both are set."""
        pubsub, firestore = (os.environ.get("PUBSUB_EMULATOR_HOST"),
                             os.environ.get("FIRESTORE_EMULATOR_HOST"))
        if pubsub and firestore:
            return cls(int(pubsub.rsplit(":", 1)[1]), int(firestore.rsplit(":", 1)[1]), False)
        return cls(emulators.free_port(), emulators.free_port(), True)


class FrontedStack(LocalStack):
    """A local stack whose push subscriptions point at the duplicating front, not the functions."""

    def __init__(self, options: StackOptions, front_url: str) -> None:
        super().__init__(options)
        self.front_url = front_url

    def endpoints(self) -> dict[str, str]:
        return {name: f"{self.front_url}/{name}" for name in FUNCTIONS}

    def function_urls(self) -> dict[str, str]:
        """Where each function itself listens (behind the front)."""
        assert self.state is not None
        return {n: f"http://127.0.0.1:{self.state.ports[n]}/" for n in FUNCTIONS}


@dataclass
class ChaosStack:
    """A running chaos stack. Build with :func:`start_chaos_stack`; stop with :meth:`stop`."""

    config: ChaosConfig
    timing: Timing
    directory: Path
    stack: FrontedStack
    state: StackState
    settings: Settings
    model_url: str
    sandbox_url: str
    ipapi_url: str
    front_url: str
    answers_subscription: str
    canary: str
    ledger_path: Path
    ref_faults_path: Path
    marker_dir: Path
    extra: list[ManagedProcess] = field(default_factory=list)
    ref_rules: dict[str, str] = field(default_factory=dict)

    # -- clients -------------------------------------------------------------------------

    def store(self) -> AgentStore:
        db = FirestoreDocumentDB.connect(self.settings.project_id)
        return AgentStore(db, self.settings.collection_prefix)

    def logs_dir(self) -> Path:
        return self.directory / "logs"

    def function_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.state.ports[name]}/"

    # -- fault hooks ---------------------------------------------------------------------

    def arm(self, point: str) -> None:
        """Let the next step that reaches ``point`` SIGKILL its process (once)."""
        (self.marker_dir / marker_name(point)).unlink(missing_ok=True)

    def disarm_all(self) -> None:
        for point in KNOWN_POINTS:
            (self.marker_dir / marker_name(point)).touch()

    def marker_time(self, point: str) -> float | None:
        """When ``point`` last fired (the marker is created just before the SIGKILL)."""
        path = self.marker_dir / marker_name(point)
        return path.stat().st_mtime if path.exists() else None

    def configure_front(self, **settings: Any) -> dict[str, Any]:
        response = httpx.post(f"{self.front_url}/_config", json=settings, timeout=5)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def front_stats(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.front_url}/_stats", timeout=5).json()
        return result

    def push_stats(self) -> dict[str, Any]:
        """The push delivery's counters, per subscription."""
        return self.stack.push_stats()

    def sweep_stats(self) -> dict[str, Any]:
        """The sweep job's counters: calls, failures, what the sweeps did."""
        url = f"http://127.0.0.1:{self.state.ports[SCHEDULER]}/_stats"
        result: dict[str, Any] = httpx.get(url, timeout=5).json()
        return result

    def model_faults(self, spec: str) -> None:
        """Schedule model faults (seconds at production scale, scaled here)."""
        httpx.post(f"{self.model_url}/_admin/faults",
                   json={"faults": scaled_spec(spec, self.timing)}, timeout=5).raise_for_status()

    def model_storm(self, kinds: str | None) -> None:
        """Answer every model call with one of ``kinds`` (production seconds), or stop."""
        body: dict[str, Any] = (
            {"fault_rate": 1.0, "fault_kinds": scaled_spec(kinds, self.timing),
             "seed": self.config.seed} if kinds else {"fault_rate": 0.0, "fault_kinds": ""})
        httpx.post(f"{self.model_url}/_admin/faults", json=body, timeout=5).raise_for_status()

    def model_reset(self) -> None:
        httpx.post(f"{self.model_url}/_admin/reset", json={}, timeout=5).raise_for_status()

    def poison_refs(self, rules: dict[str, str]) -> None:
        """Serve a fault (production seconds) to every model call of the runs whose reference
        starts with a prefix (added to the rules in force)."""
        self.ref_rules.update(rules)
        self._write_ref_rules()

    def cure_refs(self, *prefixes: str) -> None:
        """Stop poisoning the runs of these prefixes."""
        for prefix in prefixes:
            self.ref_rules.pop(prefix, None)
        self._write_ref_rules()

    def _write_ref_rules(self) -> None:
        scaled = {prefix: scaled_spec(spec, self.timing) for prefix, spec in self.ref_rules.items()}
        tmp = self.ref_faults_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(scaled))
        tmp.replace(self.ref_faults_path)

    def tool_faults(self, *, nws_error_rate: float, ipapi_timeout_rate: float) -> None:
        """Set weather.gov 500s (main sandbox) and ip-api timeouts (second sandbox)."""
        seed = self.config.seed
        httpx.post(f"{self.sandbox_url}/_admin/faults", timeout=5, json={
            "error_rate": nws_error_rate, "paths": ["/alerts"], "seed": seed,
        }).raise_for_status()
        httpx.post(f"{self.ipapi_url}/_admin/faults", timeout=5, json={
            "delay_seconds": self.timing.tool_timeout_s if ipapi_timeout_rate else 0.0,
            "delay_rate": ipapi_timeout_rate, "paths": ["/json"], "seed": seed,
        }).raise_for_status()

    def sandbox_stats(self) -> dict[str, dict[str, int]]:
        return {
            "nws_ip": httpx.get(f"{self.sandbox_url}/_admin/stats", timeout=5).json(),
            "ipapi": httpx.get(f"{self.ipapi_url}/_admin/stats", timeout=5).json(),
        }

    def publish(self, topic: str, data: bytes, **attributes: str) -> str:
        client = pubsub_v1.PublisherClient()
        message_id: str = client.publish(
            client.topic_path(self.settings.project_id, topic), data, **attributes
        ).result(timeout=30)
        return message_id

    def restart(self, name: str) -> float:
        """Start a killed function again; seconds until it is healthy."""
        return self.stack.restart_service(name)

    def stop(self) -> None:
        self.stack.down()
        for proc in reversed(self.extra):
            proc.stop()


def _env(timing: Timing, tag: str, model_url: str, ipapi_url: str, canary: str,
         project: str) -> dict[str, str]:
    """Every function's environment: the stack's names, the model and tool endpoints, and the
    shipped settings with their durations scaled (nothing else is overridden)."""
    return {
        **isolated_env(tag, project),
        "ACKLOOP_MODEL_PROVIDER": "gemini",
        "ACKLOOP_GEMINI_BASE_URL": model_url,
        "ACKLOOP_GEMINI_API_KEY": canary,
        "ACKLOOP_IPAPI_BASE_URL": ipapi_url,
        "ACKLOOP_LOG_LEVEL": "INFO",
        **timing.function_env(),
    }


def _helper(name: str, argv: list[str], logs: Path, port: int,
            env: dict[str, str] | None = None) -> ManagedProcess:
    return ManagedProcess(name, argv, logs / f"{name}.log", f"http://127.0.0.1:{port}/",
                          env={**os.environ, **(env or {})})


def _service_env(timing: Timing, marker_dir: Path) -> dict[str, dict[str, str]]:
    """Per service: its scaled request timeout, and the fault points of the step functions."""
    env = timing.service_env()
    for service, kind in (("model_step", "model"), ("tool_step", "tool")):
        env[service] = {**env.get(service, {}),
                        "ACKLOOP_FAULT_CRASH_AT": ",".join(
                            p for p in KNOWN_POINTS if p.startswith(f"{kind}:")),
                        "ACKLOOP_FAULT_MARKER_DIR": str(marker_dir)}
    return env


def start_chaos_stack(config: ChaosConfig, directory: Path, *,
                      project_id: str = "ackloop-chaos", log: Any = print) -> ChaosStack:
    """Start everything (reusing running emulators if the environment names them)."""
    timing = config.timing()
    directory.mkdir(parents=True, exist_ok=True)
    logs = directory / "logs"
    marker_dir = directory / "fault-markers"
    marker_dir.mkdir(exist_ok=True)
    for point in KNOWN_POINTS:
        (marker_dir / marker_name(point)).touch()
    tag = f"x{uuid.uuid4().hex[:8]}"
    canary = canary_key()
    ledger = directory / "model-ledger.jsonl"
    ref_faults = directory / "model-ref-faults.json"
    ref_faults.write_text("{}")
    ports = {n: emulators.free_port() for n in ("model", "ipapi", "front")}
    helpers = [
        _helper("model-server", [sys.executable, "-m", "ackloop_dev.chaos.model_server", "--port",
                                 str(ports["model"]), "--ledger", str(ledger),
                                 "--ref-faults", str(ref_faults)], logs,
                ports["model"], {"ACKLOOP_CHAOS_CANARY": canary}),
        _helper("sandbox-ipapi", [sys.executable, "-m", "ackloop_dev.fakes.sandbox_apis",
                                  "--port", str(ports["ipapi"])], logs, ports["ipapi"]),
    ]
    for proc in helpers:
        proc.start()
    model_url, ipapi_url, front_url = (f"http://127.0.0.1:{ports[n]}"
                                       for n in ("model", "ipapi", "front"))
    emu = Emulators.from_environment()
    env = _env(timing, tag, model_url, ipapi_url, canary, project_id)
    options = StackOptions(
        directory=directory, project_id=project_id, pubsub_port=emu.pubsub_port,
        firestore_port=emu.firestore_port, base_port=0, sandbox_apis=True, fake_gemini=False,
        extra_env=env, service_env=_service_env(timing, marker_dir),
        # The shipped topology and dead-letter policy (StackOptions' defaults). The emulator's
        # own push is the starting point only: the push delivery below takes every
        # subscription over before anything is published.
        push="emulator", start_emulators=emu.start, services=SERVICES,
        sweep_every_s=timing.sweep_every_s,
    )
    stack = FrontedStack(options, front_url)
    try:
        for proc in helpers:
            proc.wait_ready(30.0)
        state = stack.up(log=log)
        settings = Settings.model_validate(
            {k.removeprefix("ACKLOOP_").lower(): v for k, v in env.items()
             if k.startswith("ACKLOOP_")})
        answers = f"{tag}-answers-tail"
        subscriber = pubsub_v1.SubscriberClient()
        try:
            subscriber.create_subscription(
                name=subscriber.subscription_path(project_id, answers),
                topic=subscriber.topic_path(project_id, settings.answers_topic))
        finally:
            subscriber.close()
        routes = [f"--route={name}={url}" for name, url in stack.function_urls().items()]
        front = _helper("dup-front", [sys.executable, "-m", "ackloop_dev.chaos.proxy", "--port",
                                      str(ports["front"]), "--seed", str(config.seed),
                                      "--concurrent-share", str(config.concurrent_share),
                                      *routes, *(f"--no-duplicate={n}" for n in NOT_DUPLICATED)],
                        logs, ports["front"])
        helpers.append(front.start())
        front.wait_ready(30.0)
        took = stack.start_push_delivery(time_scale=timing.factor).wait_ready(60.0)
        log(f"  push delivery ready in {took:.1f} s: production retry policy x "
            f"{timing.factor:.4g}, via the duplicating front")
    except BaseException:
        stack.down()
        for proc in reversed(helpers):
            proc.stop()
        raise
    assert state.sandbox_url is not None
    return ChaosStack(
        config=config, timing=timing, directory=directory, stack=stack, state=state,
        settings=settings, model_url=model_url, sandbox_url=state.sandbox_url,
        ipapi_url=ipapi_url, front_url=front_url,
        answers_subscription=pubsub_v1.SubscriberClient.subscription_path(project_id, answers),
        canary=canary, ledger_path=ledger, ref_faults_path=ref_faults, marker_dir=marker_dir,
        extra=helpers,
    )
