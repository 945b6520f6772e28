"""A whole ackloop stack for end-to-end tests: real processes on the session's emulators.

Each stack gets a project of its own on the emulators (and its own topics and collection prefix
in it), so stacks (and tests) never see each other's messages or documents, and the Firestore
emulator, which answers a project's reads in time that grows with every document of that
project, answers a stack's reads whatever the rest of the session wrote. Whatever reads a
stack's data names its project: ``RunningStack.settings.project_id`` or ``state.project_id``.
The model is the scripted agent served over the Gemini REST API by the fake server, so the real
google-genai client is in the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from google.cloud import pubsub_v1

from ackloop.config.settings import Settings
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.records import RunRecord, StepRecord
from ackloop.domain.wire import QueryMessage
from ackloop.store import AgentStore
from ackloop.telemetry.metrics_file import Series, read_series
from ackloop.testing.localstack import StackState
from ackloop_dev.bench import push_answers
from ackloop_dev.devstack.stack import (
    PUSH_DELIVERY,
    SERVICES,
    LocalStack,
    StackOptions,
    isolated_env,
)
from ackloop_dev.devstack.topology import PushMode
from tests.support.emulators import EmulatorSession

CHECKOUT = Path(__file__).resolve().parents[2]


@dataclass
class RunningStack:
    stack: LocalStack
    state: StackState
    settings: Settings
    answers_subscription: str

    @property
    def fake_gemini(self) -> str:
        assert self.state.fake_gemini_url
        return self.state.fake_gemini_url

    def store(self) -> AgentStore:
        return AgentStore(FirestoreDocumentDB.connect(self.settings.project_id),
                          self.settings.collection_prefix)

    def stop_every_process(self) -> None:
        """Stop every ackloop process of the stack (the functions, the API, the push delivery),
        leaving the emulators and their data: what a deployment is when nothing runs."""
        for name in (*SERVICES, PUSH_DELIVERY):
            self.stack.processes[name].stop()

    def restart_every_process(self) -> None:
        """Start again what :meth:`stop_every_process` stopped; ready once each answers."""
        for name in SERVICES:
            self.stack.restart_service(name)
        self.stack.start_push_delivery().wait_ready(60.0)

    def publish(self, topic: str, data: bytes, **attributes: str) -> str:
        client = pubsub_v1.PublisherClient()
        return client.publish(client.topic_path(self.settings.project_id, topic), data,
                              **attributes).result(timeout=30)

    def ask(self, text: str, *, request_id: str | None = None, **fields: Any) -> str:
        request_id = request_id or f"t-{uuid.uuid4().hex[:12]}"
        query = QueryMessage(request_id=request_id, text=text, **fields)
        self.publish(self.settings.queries_topic, query.model_dump_json().encode())
        return run_id_for_request(request_id)

    async def wait_run(
        self, run_id: str, timeout: float = 60.0
    ) -> tuple[RunRecord, list[StepRecord]]:
        store = self.store()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = await store.runs.get_run(run_id)
            if run is not None and run.status.terminal:
                return run, await store.steps.list_steps(run_id)
            await asyncio.sleep(0.1)
        raise AssertionError(f"run {run_id} not finished after {timeout} s: {run}")

    def model_stats(self) -> dict[str, Any]:
        return httpx.get(f"{self.fake_gemini}/_admin/stats", timeout=5).json()

    def model_requests(self) -> list[dict[str, Any]]:
        """Every request body the fake Gemini server received, oldest first."""
        bodies: list[dict[str, Any]] = httpx.get(
            f"{self.fake_gemini}/_admin/requests", timeout=5).json()["requests"]
        return bodies

    def schedule_model_faults(self, spec: str) -> None:
        httpx.post(f"{self.fake_gemini}/_admin/faults", json={"faults": spec},
                   timeout=5).raise_for_status()

    def set_sandbox_faults(self, **faults: object) -> None:
        """Change the tool APIs' sandbox faults (see ackloop_dev.fakes.sandbox_faults.Faults)."""
        assert self.state.sandbox_url
        httpx.post(f"{self.state.sandbox_url}/_admin/faults", json=faults,
                   timeout=5).raise_for_status()

    def sandbox_stats(self) -> dict[str, int]:
        """Counters of the tool APIs' sandbox: ``requests`` is how many tool HTTP calls ran."""
        assert self.state.sandbox_url
        stats: dict[str, int] = httpx.get(f"{self.state.sandbox_url}/_admin/stats",
                                          timeout=5).json()
        return stats

    def service(self, name: str) -> dict[str, Any]:
        """A function's ``GET /``: health, its store's and publisher's counters."""
        return httpx.get(f"http://127.0.0.1:{self.state.ports[name]}/", timeout=5).json()

    def push_answers(self, function: str) -> Counter[str]:
        """Pushes to ``function`` by answer (``"204"``, ``"503"``, ``"timeout"``, …) as the push
        delivery saw them, once nothing it holds is in flight (a message waiting for its
        redelivery counts as in flight, so a nacked push is never missed)."""
        endpoint = f"http://127.0.0.1:{self.state.ports[function]}/"
        stats = push_answers.settled(self.stack.push_stats)
        total: Counter[str] = Counter()
        for sub in stats["subscriptions"].values():
            if sub["endpoint"] == endpoint:
                total.update(sub["answers"])
        return total

    async def settled_metrics(self, done: Callable[[list[Series]], bool],
                              timeout: float = 30.0) -> list[Series]:
        """The stack's metrics (every process's file under ``metrics``) once ``done`` holds, or
        as they are after ``timeout`` seconds (processes export every second)."""
        directory = Path(self.state.directory) / "metrics"
        deadline = time.monotonic() + timeout
        while True:
            series = read_series(directory)
            if done(series) or time.monotonic() > deadline:
                return series
            await asyncio.sleep(0.2)

    def pull_answers(self, timeout: float = 10.0) -> list[dict[str, Any]]:
        subscriber = pubsub_v1.SubscriberClient()
        try:
            response = subscriber.pull(subscription=self.answers_subscription,
                                       max_messages=100, timeout=timeout)
            if response.received_messages:
                subscriber.acknowledge(subscription=self.answers_subscription,
                                       ack_ids=[m.ack_id for m in response.received_messages])
            return [json.loads(m.message.data) for m in response.received_messages]
        finally:
            subscriber.close()

    def stop(self) -> None:
        self.stack.down()


def start_stack(
    session: EmulatorSession,
    directory: Path,
    *,
    service_env: dict[str, dict[str, str]] | None = None,
    extra_env: dict[str, str] | None = None,
    max_delivery_attempts: int | None = None,
    push: PushMode = "twin",
    push_time_scale: float = 1.0,
    agents: str | None = None,
    project_id: str | None = None,
) -> RunningStack:
    """A stack of real processes; ``push="twin"`` (the default, as ``ackloop dev up``) delivers
    with the production-like push delivery, ``"emulator"`` with the emulator's own push.
    ``agents`` is an agent catalog under ``tests`` (``ACKLOOP_AGENTS``) that every process,
    the fake Gemini server included, imports from the checkout. ``project_id`` is the stack's
    project on the emulators: by default one of its own, named after the session's and the
    stack's tag (``ackloop-test-s1a2b3c4d``)."""
    tag = f"s{uuid.uuid4().hex[:8]}"
    project = project_id or f"{session.project_id}-{tag}"
    env = isolated_env(tag, project) | (extra_env or {})
    options = StackOptions(
        directory=directory,
        project_id=project,
        pubsub_port=session.pubsub_port,
        firestore_port=session.firestore_port,
        base_port=0,
        start_emulators=False,
        sandbox_apis=True,
        fake_gemini=True,
        extra_env=env,
        service_env=service_env or {},
        # The shipped dead-letter policy unless a test asks for another.
        **({} if max_delivery_attempts is None
           else {"max_delivery_attempts": max_delivery_attempts}),
        push=push,
        push_time_scale=push_time_scale,
        agents=agents,
        python_path=(CHECKOUT,) if agents else (),
    )
    stack = LocalStack(options)
    state = stack.up(log=lambda *_: None)
    # The project under its variable's name: Settings takes project_id only by its aliases
    # (a project_id key would be ignored for the environment's ACKLOOP_PROJECT_ID).
    settings = Settings.model_validate(
        {k.removeprefix("ACKLOOP_").lower(): v for k, v in env.items()
         if k.startswith("ACKLOOP_")} | {"ACKLOOP_PROJECT_ID": project})
    subscriber = pubsub_v1.SubscriberClient()
    answers = subscriber.subscription_path(project, f"{tag}-answers-tail")
    subscriber.create_subscription(
        name=answers, topic=subscriber.topic_path(project, settings.answers_topic)
    )
    subscriber.close()
    return RunningStack(stack, state, settings, answers)


@contextlib.contextmanager
def stack_factory(
    session: EmulatorSession, directory: Path, base_env: dict[str, str] | None = None
) -> Iterator[Callable[..., RunningStack]]:
    """Start stacks of one's own (fault points, other settings) with ``make(**options)``;
    every stack started is stopped on exit."""
    started: list[RunningStack] = []

    def make(**options: Any) -> RunningStack:
        options["extra_env"] = (base_env or {}) | options.get("extra_env", {})
        running = start_stack(session, directory / f"stack{len(started)}", **options)
        started.append(running)
        return running

    try:
        yield make
    finally:
        for running in started:
            running.stop()
