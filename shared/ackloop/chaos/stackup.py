"""The stack a chaos run drives, and its fault hooks.

It is :class:`~ackloop.devstack.stack.LocalStack` (emulators, sandbox APIs, every function run by
``ackloop run``) plus three processes of its own: the fake Gemini server with a ledger
(:mod:`ackloop.chaos.model_server`), a second sandbox that serves ip-api (so its timeouts can be
set apart from weather.gov's 500s) and the duplicating proxy (:mod:`ackloop.chaos.proxy`), which
the push subscriptions are re-pointed at. The model and tool functions start with every fault
point of their kind configured but disarmed (marker files present); :meth:`ChaosStack.arm`
removes one marker so the next step that reaches that point SIGKILLs its process.
"""

from __future__ import annotations

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

from ackloop.chaos.config import ChaosConfig
from ackloop.devstack import emulators
from ackloop.devstack.processes import ManagedProcess
from ackloop.devstack.stack import FUNCTIONS, LocalStack, StackOptions, StackState, isolated_env
from ackloop.devstack.topology import create_topology, routes
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.engine.deps import FAULT_POINTS
from ackloop.settings import Settings
from ackloop.store import AgentStore

PUSHED = ("ingest", "model_step", "tool_step")
"""Functions behind the duplicating proxy (the dead-letter function is reached directly)."""


def canary_key() -> str:
    """A fresh fake API key shaped like a Google one: it must never show up in logs or prompts."""
    alphabet = string.ascii_letters + string.digits
    return "AIza" + "".join(secrets.choice(alphabet) for _ in range(35))


def marker_name(point: str) -> str:
    """The marker file :class:`~ackloop.engine.deps.FaultPoints` uses for ``point``."""
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


@dataclass
class ChaosStack:
    """A running chaos stack. Build with :func:`start_chaos_stack`; stop with :meth:`stop`."""

    config: ChaosConfig
    directory: Path
    stack: LocalStack
    state: StackState
    settings: Settings
    model_url: str
    sandbox_url: str
    ipapi_url: str
    proxy_url: str
    endpoints: dict[str, str]
    answers_subscription: str
    canary: str
    ledger_path: Path
    marker_dir: Path
    extra: list[ManagedProcess] = field(default_factory=list)

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
        for point in FAULT_POINTS:
            (self.marker_dir / marker_name(point)).touch()

    def marker_time(self, point: str) -> float | None:
        """When ``point`` last fired (the marker is created just before the SIGKILL)."""
        path = self.marker_dir / marker_name(point)
        return path.stat().st_mtime if path.exists() else None

    def configure_proxy(self, **settings: Any) -> dict[str, Any]:
        response = httpx.post(f"{self.proxy_url}/_config", json=settings, timeout=5)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    def proxy_stats(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.proxy_url}/_stats", timeout=5).json()
        return result

    def model_faults(self, spec: str) -> None:
        httpx.post(f"{self.model_url}/_admin/faults", json={"faults": spec},
                   timeout=5).raise_for_status()

    def model_reset(self) -> None:
        httpx.post(f"{self.model_url}/_admin/reset", json={}, timeout=5).raise_for_status()

    def tool_faults(self, *, nws_error_rate: float, ipapi_timeout_rate: float) -> None:
        """Set weather.gov 500s (main sandbox) and ip-api timeouts (second sandbox)."""
        seed = self.config.seed
        httpx.post(f"{self.sandbox_url}/_admin/faults", timeout=5, json={
            "error_rate": nws_error_rate, "paths": ["/alerts"], "seed": seed,
        }).raise_for_status()
        httpx.post(f"{self.ipapi_url}/_admin/faults", timeout=5, json={
            "delay_seconds": self.config.tool_timeout_s if ipapi_timeout_rate else 0.0,
            "delay_rate": ipapi_timeout_rate, "paths": ["/json"], "seed": seed,
        }).raise_for_status()

    def sandbox_stats(self) -> dict[str, dict[str, int]]:
        return {
            "nws_ip": httpx.get(f"{self.sandbox_url}/_admin/stats", timeout=5).json(),
            "ipapi": httpx.get(f"{self.ipapi_url}/_admin/stats", timeout=5).json(),
        }

    def set_dead_letter_attempts(self, attempts: int) -> None:
        """Re-create the push subscriptions with another dead-letter policy (only while no
        message is in flight: re-creating drops what a subscription holds)."""
        push_subscriptions(self.settings, self.endpoints, attempts)

    def publish(self, topic: str, data: bytes, **attributes: str) -> str:
        client = pubsub_v1.PublisherClient()
        message_id: str = client.publish(
            client.topic_path(self.settings.project_id, topic), data, **attributes
        ).result(timeout=30)
        return message_id

    def pull_answers(self) -> list[bytes]:
        """Drain the answers subscription."""
        subscriber = pubsub_v1.SubscriberClient()
        found: list[bytes] = []
        try:
            while True:
                response = subscriber.pull(subscription=self.answers_subscription,
                                           max_messages=500, timeout=10)
                if not response.received_messages:
                    return found
                found += [m.message.data for m in response.received_messages]
                subscriber.acknowledge(subscription=self.answers_subscription,
                                       ack_ids=[m.ack_id for m in response.received_messages])
        finally:
            subscriber.close()

    def restart(self, name: str) -> float:
        """Start a killed function again; seconds until it is healthy."""
        return self.stack.restart_service(name)

    def stop(self) -> None:
        self.stack.down()
        for proc in reversed(self.extra):
            proc.stop()


ACK_DEADLINE_S = 15
"""Ack deadline of the step subscriptions: longer than any delivery here takes."""
def push_subscriptions(settings: Settings, endpoints: dict[str, str], attempts: int) -> None:
    """(Re-)create the subscriptions: the step ones as pull subscriptions that the delivery
    proxy (:mod:`ackloop.chaos.proxy`) turns into push, dead-lettering after ``attempts``
    deliveries; the dead-letter one as a plain push subscription."""
    subscriber = pubsub_v1.SubscriberClient()
    project = settings.project_id
    try:
        for route in routes(settings, endpoints):
            name = subscriber.subscription_path(project, route.subscription)
            subscriber.delete_subscription(subscription=name)
            request: dict[str, Any] = {
                "name": name,
                "topic": subscriber.topic_path(project, route.topic),
                "ack_deadline_seconds": ACK_DEADLINE_S,
                # No retry policy: see ackloop.devstack.topology (the emulator stops
                # redelivering after ~3 attempts when one is set).
            }
            if not route.dead_letter:  # the dead-letter function: the emulator pushes
                request["push_config"] = {"push_endpoint": route.endpoint}
            if route.dead_letter:
                request["dead_letter_policy"] = {
                    "dead_letter_topic": subscriber.topic_path(project, settings.dead_letter_topic),
                    "max_delivery_attempts": attempts,
                }
            subscriber.create_subscription(request=request)
    finally:
        subscriber.close()


def _env(config: ChaosConfig, tag: str, model_url: str, ipapi_url: str, canary: str,
         project: str) -> dict[str, str]:
    return {
        **isolated_env(tag, project),
        "ACKLOOP_MODEL_PROVIDER": "gemini",
        "ACKLOOP_GEMINI_BASE_URL": model_url,
        "ACKLOOP_GEMINI_API_KEY": canary,
        "ACKLOOP_IPAPI_BASE_URL": ipapi_url,
        "ACKLOOP_LEASE_SECONDS": f"{config.lease_seconds:g}",
        "ACKLOOP_MODEL_TIMEOUT_SECONDS": f"{config.model_timeout_s:g}",
        "ACKLOOP_TOOL_TIMEOUT_SECONDS": f"{config.tool_timeout_s:g}",
        "ACKLOOP_MAX_STEP_ATTEMPTS": str(config.max_step_attempts),
        "ACKLOOP_LOG_LEVEL": "INFO",
        **config.extra,
    }


def _helper(name: str, argv: list[str], logs: Path, port: int,
            env: dict[str, str] | None = None) -> ManagedProcess:
    return ManagedProcess(name, argv, logs / f"{name}.log", f"http://127.0.0.1:{port}/",
                          env={**os.environ, **(env or {})})


def start_chaos_stack(config: ChaosConfig, directory: Path, *,
                      project_id: str = "ackloop-chaos", log: Any = print) -> ChaosStack:
    """Start everything (reusing running emulators if the environment names them)."""
    directory.mkdir(parents=True, exist_ok=True)
    logs = directory / "logs"
    marker_dir = directory / "fault-markers"
    marker_dir.mkdir(exist_ok=True)
    for point in FAULT_POINTS:
        (marker_dir / marker_name(point)).touch()
    tag = f"x{uuid.uuid4().hex[:8]}"
    canary = canary_key()
    ledger = directory / "model-ledger.jsonl"
    ports = {n: emulators.free_port() for n in ("model", "ipapi", "proxy")}
    helpers = [
        _helper("model-server", [sys.executable, "-m", "ackloop.chaos.model_server", "--port",
                                 str(ports["model"]), "--ledger", str(ledger)], logs,
                ports["model"], {"ACKLOOP_CHAOS_CANARY": canary}),
        _helper("sandbox-ipapi", [sys.executable, "-m", "ackloop.tools.sandbox_apis",
                                  "--port", str(ports["ipapi"])], logs, ports["ipapi"]),
    ]
    for proc in helpers:
        proc.start()
    model_url, ipapi_url = (f"http://127.0.0.1:{ports[n]}" for n in ("model", "ipapi"))
    emu = Emulators.from_environment()
    env = _env(config, tag, model_url, ipapi_url, canary, project_id)
    crash = {
        "model_step": {"ACKLOOP_FAULT_CRASH_AT": "model:after_call,model:after_commit",
                       "ACKLOOP_FAULT_MARKER_DIR": str(marker_dir)},
        "tool_step": {"ACKLOOP_FAULT_CRASH_AT": "tool:after_call,tool:after_commit",
                      "ACKLOOP_FAULT_MARKER_DIR": str(marker_dir)},
    }
    options = StackOptions(
        directory=directory, project_id=project_id, pubsub_port=emu.pubsub_port,
        firestore_port=emu.firestore_port, base_port=0, sandbox_apis=True, fake_gemini=False,
        extra_env=env, service_env=crash, max_delivery_attempts=config.max_delivery_attempts,
        start_emulators=emu.start, services=("ingest", "model_step", "tool_step", "dead_letter"),
    )
    stack = LocalStack(options)
    try:
        for proc in helpers:
            proc.wait_ready(30.0)
        state = stack.up(log=log)
        settings = Settings.model_validate(
            {k.removeprefix("ACKLOOP_").lower(): v for k, v in env.items()
             if k.startswith("ACKLOOP_")})
        endpoints = {n: f"http://127.0.0.1:{state.ports[n]}/" for n in FUNCTIONS}
        answers = f"{tag}-answers-tail"
        create_topology(settings, endpoints, max_delivery_attempts=config.max_delivery_attempts,
                        answers_subscription=answers)
        push_subscriptions(settings, endpoints, config.max_delivery_attempts)
        subscriber = pubsub_v1.SubscriberClient
        delivered = [f"--route={subscriber.subscription_path(project_id, r.subscription)}="
                     f"{name}={r.endpoint}" for r in routes(settings, endpoints)
                     for name in PUSHED if r.endpoint == endpoints[name]]
        proxy = _helper("dup-proxy", [sys.executable, "-m", "ackloop.chaos.proxy", "--port",
                                      str(ports["proxy"]), "--seed", str(config.seed),
                                      "--concurrent-share", str(config.concurrent_share),
                                      *delivered], logs, ports["proxy"])
        helpers.append(proxy.start())
        proxy.wait_ready(30.0)
        proxy_url = f"http://127.0.0.1:{ports['proxy']}"
        log("  step subscriptions delivered by the duplicating proxy")
    except BaseException:
        stack.down()
        for proc in reversed(helpers):
            proc.stop()
        raise
    assert state.sandbox_url is not None
    return ChaosStack(
        config=config, directory=directory, stack=stack, state=state, settings=settings,
        model_url=model_url, sandbox_url=state.sandbox_url, ipapi_url=ipapi_url,
        proxy_url=proxy_url, endpoints=endpoints,
        answers_subscription=pubsub_v1.SubscriberClient.subscription_path(project_id, answers),
        canary=canary, ledger_path=ledger, marker_dir=marker_dir, extra=helpers,
    )
