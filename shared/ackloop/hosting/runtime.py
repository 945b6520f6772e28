"""Building a process's dependencies once, before it serves, from the settings.

Nothing here runs at import time: the function module is imported before the event loop exists,
and clients bound to a loop must be created inside it.

A process told which service it is (:func:`serve_target`, by ``ackloop run``) builds only what
that service uses: every service but the model step gets a model client that is checked now and
built on its first call (:class:`DeferredModel`), so google-genai (0.3 s of CPU to import) is not
part of their cold start; and every service but the tool step gets an HTTP client whose connection
pool is built on its first request (:class:`PoolOnFirstUse`): only tools use that client, and its
pool costs an import of httpcore and a load of the CA bundle.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable

import httpx

from ackloop.agents.agent import AgentRegistry
from ackloop.bus.pubsub import PubSubPublisher
from ackloop.bus.wakes import NoWaker, Waker
from ackloop.config.settings import Settings
from ackloop.docdb.counting import CountingDocumentDB
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.domain.clock import SystemClock
from ackloop.engine.deps import Deps
from ackloop.files import FileStore, MemoryFileStore
from ackloop.model.base import ModelClient, ModelRequest, ModelTurn
from ackloop.store import AgentStore, Retention
from ackloop.store.chunk_cache import chunk_decode_cache

log = logging.getLogger(__name__)

_deps: Deps | None = None
_lock = asyncio.Lock()
_target: str | None = None

MODEL_CALLERS = frozenset({"model_step", "steps", "all"})
"""The services that call the model; any other builds its client on first use only."""

TOOL_CALLERS = frozenset({"tool_step", "steps", "all"})
"""The services that run tools, the users of the process's HTTP client; any other builds that
client's connection pool on its first request only."""


def serve_target(target: str | None) -> None:
    """Name the ``FUNCTION_TARGET`` this process serves (None: unknown, build everything)."""
    global _target
    _target = target


class DeferredModel:
    """A model client built on its first call, for a service that does not call the model.

    Its configuration is checked when it is made (:func:`check_model`), so a misconfigured model
    still stops every process at start-up; ``provider`` is known without building it.
    """

    def __init__(self, provider: str, build: Callable[[], ModelClient]) -> None:
        self.provider = provider
        self._build = build
        self._client: ModelClient | None = None

    @property
    def built(self) -> bool:
        """Whether the real client exists (it is built on the first :meth:`generate`)."""
        return self._client is not None

    async def generate(self, request: ModelRequest) -> ModelTurn:
        if self._client is None:
            self._client = self._build()
        return await self._client.generate(request)


class PoolOnFirstUse(httpx.AsyncBaseTransport):
    """httpx's default transport (``httpx.AsyncHTTPTransport()``, what ``httpx.AsyncClient``
    builds when given none), built on the first request rather than with the client."""

    def __init__(self) -> None:
        self._transport: httpx.AsyncHTTPTransport | None = None

    @property
    def built(self) -> bool:
        return self._transport is not None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._transport is None:
            self._transport = httpx.AsyncHTTPTransport()
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        if self._transport is not None:
            await self._transport.aclose()


def build_http(settings: Settings, target: str | None) -> httpx.AsyncClient:
    """The process's HTTP client (for tools, handed to the agent catalog): its pool built now
    where tools run (or the target is unknown), else on its first request."""
    deferred = target is not None and target not in TOOL_CALLERS
    return httpx.AsyncClient(
        timeout=httpx.Timeout(settings.tool_timeout_seconds, connect=5.0),
        follow_redirects=True,
        headers={"User-Agent": "ackloop/0.1 (+https://github.com/ackloop/ackloop)"},
        transport=PoolOnFirstUse() if deferred else None,
    )


def check_model(settings: Settings) -> None:
    """What building the model would refuse, found without building it (nor importing its SDK).

    Raises the same :class:`ValueError` as :class:`~ackloop.model.gemini.GeminiModel`, and
    registers the API key as a secret as building it does.
    """
    if settings.resolved_model_provider() != "gemini":
        return
    from ackloop.telemetry.masking import register_secret

    api_key = settings.gemini_api_key.get_secret_value() if settings.gemini_api_key else None
    register_secret(api_key)
    if not settings.use_vertexai and not api_key:
        raise ValueError("the Gemini Developer API needs an api_key (or use vertexai=True)")


def model_for(settings: Settings, agents: AgentRegistry, target: str | None) -> ModelClient:
    """The model client of a process serving ``target``: built now where the model is called
    (or the target is unknown), else checked now and built on first use."""
    if target is None or target in MODEL_CALLERS:
        return build_model(settings, agents)
    check_model(settings)
    return DeferredModel(settings.resolved_model_provider(),
                         lambda: build_model(settings, agents))


def build_model(settings: Settings, agents: AgentRegistry) -> ModelClient:
    """Gemini, or (without credentials) the scripted model playing each agent's own script."""
    if settings.resolved_model_provider() == "gemini":
        from ackloop.model.gemini import build_gemini_model

        return build_gemini_model(settings)
    # The scripted model checks requests and builds turns with google-genai's types: loaded
    # now, as the Gemini client loads them, not by the first model step served.
    import google.genai.types  # noqa: F401

    from ackloop.agents.scripts import CatalogScript
    from ackloop.model.scripted import ScriptedModel

    return ScriptedModel(CatalogScript(agents))


def build_agents(settings: Settings, http: httpx.AsyncClient) -> AgentRegistry:
    """The catalog the settings name (raises :class:`ackloop.agents.catalog.CatalogError`)."""
    from ackloop.agents.catalog import load_registry

    return load_registry(settings, http)


def configure_logging(settings: Settings) -> None:
    from ackloop.telemetry.logs import configure

    configure(settings.log_level, settings.project_id)


def configure_tracing(settings: Settings) -> None:
    from ackloop.telemetry import tracing

    tracing.configure(settings.trace_export, settings.trace_dir, settings.project_id)


def configure_metrics(settings: Settings) -> None:
    """Metrics as ``ACKLOOP_METRICS_EXPORT`` and ``ACKLOOP_METRICS_DIR`` ask (telemetry.metrics)."""
    from ackloop.telemetry import metrics, tracing

    metrics.configure(settings.project_id, tracing.service_name())


def build_files(settings: Settings) -> FileStore:
    """Where file bytes live: the ``files_bucket`` (Cloud Storage, or its emulator when
    ``STORAGE_EMULATOR_HOST`` is set), else this process's memory (which only one process
    can use: a query's files would not reach the model step of another)."""
    if settings.files_bucket:
        from ackloop.files.gcs import GcsFileStore

        return GcsFileStore(settings.files_bucket, project=settings.project_id,
                            inline_bytes=settings.files_inline_bytes)
    return MemoryFileStore(inline_bytes=settings.files_inline_bytes)


def build_waker(settings: Settings) -> Waker:
    """What publishes a sleeping call's message at its time: the ``wake_queue`` (Cloud Tasks,
    or the local stack's task queue when ``tasks_emulator_host`` is set, publishing to the
    Pub/Sub emulator), else nothing (the sweeper wakes what is due)."""
    if not settings.wake_queue:
        return NoWaker()
    from ackloop.bus.wakes import CloudTasksWaker

    local = settings.tasks_emulator_host
    return CloudTasksWaker(settings.wake_queue, settings.wake_identity, settings.project_id,
                           emulator_host=local,
                           pubsub_emulator_host=os.environ.get("PUBSUB_EMULATOR_HOST")
                           if local else None)


async def build_deps(settings: Settings) -> Deps:
    configure_logging(settings)
    configure_tracing(settings)
    configure_metrics(settings)
    db = CountingDocumentDB(
        FirestoreDocumentDB.connect(settings.project_id, settings.firestore_database,
                                    decode_cache=chunk_decode_cache(settings.decode_cache_bytes))
    )
    http = build_http(settings, _target)
    agents = build_agents(settings, http)
    model = model_for(settings, agents, _target)
    deps = Deps(
        settings=settings,
        store=AgentStore(db, settings.collection_prefix, Retention.from_settings(settings)),
        publisher=PubSubPublisher(settings.project_id),
        model=model,
        agents=agents,
        clock=SystemClock(),
        owner=f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}",
        files=build_files(settings),
        waker=build_waker(settings),
    )
    deps.refresh_limits_soon()  # the limits set while the deployment runs, read beside
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
