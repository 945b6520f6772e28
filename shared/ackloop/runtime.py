"""Building a process's dependencies once, on its first request, from the settings.

Nothing here runs at import time: functions-framework imports the function module before the
event loop exists, and clients bound to a loop must be created inside it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

import httpx

from ackloop.agents import AgentRegistry
from ackloop.bus.pubsub import PubSubPublisher
from ackloop.clock import SystemClock
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.engine.deps import Deps
from ackloop.model.base import ModelClient
from ackloop.settings import Settings
from ackloop.store import AgentStore, Retention

log = logging.getLogger(__name__)

_deps: Deps | None = None
_lock = asyncio.Lock()


def build_model(settings: Settings, agents: AgentRegistry) -> ModelClient:
    """Gemini, or (without credentials) the scripted model playing each agent's own script."""
    if settings.resolved_model_provider() == "gemini":
        from ackloop.model.gemini import build_gemini_model

        return build_gemini_model(settings)
    from ackloop.model.agent_scripts import CatalogScript
    from ackloop.model.scripted import ScriptedModel

    return ScriptedModel(CatalogScript(agents))


def build_agents(settings: Settings, http: httpx.AsyncClient) -> AgentRegistry:
    """The catalog the settings name (raises :class:`ackloop.catalog.CatalogError`)."""
    from ackloop.catalog import load_agents

    return AgentRegistry(load_agents(settings, http))


def configure_logging(settings: Settings) -> None:
    from ackloop.logs import configure

    configure(settings.log_level, settings.project_id)


def configure_tracing(settings: Settings) -> None:
    from ackloop.telemetry import tracing

    tracing.configure(settings.trace_export, settings.trace_dir, settings.project_id)


def configure_metrics(settings: Settings) -> None:
    """Metrics as ``ACKLOOP_METRICS_EXPORT`` and ``ACKLOOP_METRICS_DIR`` ask (telemetry.metrics)."""
    from ackloop.telemetry import metrics, tracing

    metrics.configure(settings.project_id, tracing.service_name())


async def build_deps(settings: Settings) -> Deps:
    configure_logging(settings)
    configure_tracing(settings)
    configure_metrics(settings)
    db = CountingDocumentDB(
        FirestoreDocumentDB.connect(settings.project_id, settings.firestore_database)
    )
    http = httpx.AsyncClient(
        timeout=httpx.Timeout(settings.tool_timeout_seconds, connect=5.0),
        follow_redirects=True,
        headers={"User-Agent": "ackloop/0.1 (+https://github.com/ackloop/ackloop)"},
    )
    agents = build_agents(settings, http)
    model = build_model(settings, agents)
    deps = Deps(
        settings=settings,
        store=AgentStore(db, settings.collection_prefix, Retention.from_settings(settings)),
        publisher=PubSubPublisher(settings.project_id),
        model=model,
        agents=agents,
        clock=SystemClock(),
        owner=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
    )
    log.info(
        "ackloop process ready: model provider %s (%s), agents %s",
        model.provider,
        settings.model,
        deps.agents.names(),
    )
    return deps


async def process_deps() -> Deps:
    """This process's dependencies, built on first use."""
    global _deps
    if _deps is None:
        async with _lock:
            if _deps is None:
                _deps = await build_deps(Settings())
    return _deps
