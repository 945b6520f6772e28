"""Tools from an MCP server: a :class:`~ackloop.tools.base.Toolbox` whose tools a Model Context
Protocol server lists and runs, under the engine's rules for any tool.

    orders = MCPServer.stdio("python", ["-m", "orders_mcp"])
    agent = Agent(..., tools=mcp_tools(orders, retry_safe={"refund": False}))

* **Declarations** come from the server's ``tools/list``, asked once per process (the first
  step that needs them awaits :meth:`MCPToolbox.prepare`) and kept: each input schema is
  flattened to what Gemini accepts. A server that cannot be reached is a retryable error, so
  the step is redelivered instead of offering the model no tools.
* **Calls** run as any tool's (:class:`~ackloop.tools.toolset.ToolSet`): cut at the timeout,
  secrets masked, the result capped at ``max_output_bytes``; an ``isError`` result is a
  :class:`~ackloop.tools.errors.ToolError` the model reads. The step's idempotency key travels in
  the request's ``_meta`` as ``ackloop/idempotency_key``, so a server can dedupe a re-run.
* **retry_safe** comes from the tool's annotations (``readOnlyHint`` or ``idempotentHint``; the
  MCP default of neither means "not safe") unless given: a taken-over step of a tool that is not
  safe does not call it again.

The MCP SDK is imported on first use, so a process whose agents use no MCP server never loads
it; without the package, making an :class:`MCPServer` says which extra to install.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import importlib.util
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from ackloop.domain.errors import PermanentError, RetryableError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.telemetry.masking import is_secret_name
from ackloop.tools.base import ToolContext, ToolOutcome
from ackloop.tools.definition import DEFAULT_MAX_OUTPUT_BYTES, Tool
from ackloop.tools.errors import ToolError
from ackloop.tools.files import File
from ackloop.tools.outcome import error_outcome
from ackloop.tools.schema import SchemaError, json_schema_parameters
from ackloop.tools.toolset import ToolSet

if TYPE_CHECKING:
    import mcp
    from anyio.streams.memory import MemoryObjectReceiveStream
    from mcp.client._transport import TransportStreams
    from mcp_types import CallToolResult, ContentBlock, RequestParamsMeta
    from mcp_types import Tool as ListedTool

log = logging.getLogger(__name__)

IDEMPOTENCY_META_KEY: Final = "ackloop/idempotency_key"
"""The ``_meta`` key of a ``tools/call`` request that carries the step's idempotency key."""
LIST_TIMEOUT_SECONDS = 30.0
"""Bound on connecting to a server and listing its tools."""
_MAX_PAGES = 100
_INSTALL_HINT = "MCP tools need the MCP SDK: pip install 'ackloop[mcp]'"


class MCPNotInstalled(ImportError):
    """The ``mcp`` package is missing: the ``mcp`` extra was not installed."""


class MCPUnavailable(RetryableError):
    """The server could not be started, reached or listed; a later delivery may succeed."""


class MCPToolsInvalid(PermanentError):
    """What the server lists cannot be offered as configured (a name Gemini refuses, a schema
    that cannot be flattened, an ``include`` the server does not list)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="mcp_tools_invalid")


class MCPServer:
    """Where an MCP server is and how to reach it; make one with :meth:`stdio` or :meth:`http`.

    Connection lifetime, for a stateless function that serves many steps:

    * **stdio**: the server process is started on first use and shared by every call of this
      process (one per event loop), because starting a server costs seconds and a step pays for
      nothing else. A server that has exited is started again on the next call. A call in flight
      when it dies fails with "may or may not have taken effect", as a crash does. ``aclose()``
      stops it; so does the end of this process (the server reads the end of its stdin).
    * **http** (streamable HTTP): a session per call, closed with it. A session kept open would be
      state held between requests by a function that may be frozen or scaled away at any time,
      on a server that expires idle sessions; one more round trip per call buys a process that
      holds no connection when it is idle and cannot leak one.
    """

    def __init__(self, name: str, connection: _Connection) -> None:
        self.name = name
        self._connection = connection

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Iterable[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        name: str | None = None,
    ) -> MCPServer:
        """A server run as ``command args...``, spoken to over its stdin and stdout.

        It inherits only a safe minimum of this process's environment (``PATH``, ``HOME``, ...)
        plus ``env``; its stderr goes to this process's stderr.
        """
        _require_sdk()
        params = _StdioParams(command, tuple(args), dict(env or {}), cwd)
        return cls(name or command, _SharedStdio(params))

    @classmethod
    def http(
        cls, url: str, *, headers: Mapping[str, str] | None = None, name: str | None = None
    ) -> MCPServer:
        """A server at ``url`` over streamable HTTP; ``headers`` go with every request."""
        _require_sdk()
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"an MCP server URL must be http(s)://host/...; got {url!r}")
        return cls(name or parts.hostname, _HttpSessions(url, dict(headers or {})))

    def secrets(self) -> tuple[str, ...]:
        """Values to mask in what the model reads: this server's credential headers."""
        return self._connection.secrets()

    async def list_tools(self) -> list[ListedTool]:
        """Every tool the server lists (all pages)."""
        try:
            async with asyncio.timeout(LIST_TIMEOUT_SECONDS), self._connection.client() as client:
                tools: list[ListedTool] = []
                cursor: str | None = None
                for _ in range(_MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if cursor is None:
                        break
                return tools
        except Exception as exc:
            raise MCPUnavailable(
                f"MCP server {self.name!r} could not be listed: {_describe(exc)}"
            ) from exc

    async def call_tool(
        self, name: str, arguments: JsonDict, *, idempotency_key: str
    ) -> CallToolResult:
        """Call ``name`` with the idempotency key in the request's ``_meta``.

        Raises :class:`ToolError` when the server cannot be reached or the connection ends
        during the call: written for the model, which reads it as the call's result.
        """
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED

        try:
            async with self._connection.client() as client:
                try:
                    # An open map of extra keys, which type checkers cannot spell yet.
                    meta = cast("RequestParamsMeta", {IDEMPOTENCY_META_KEY: idempotency_key})
                    return await client.call_tool(name, arguments, meta=meta)
                except MCPError as exc:
                    if exc.code != CONNECTION_CLOSED:
                        raise
                    raise ToolError(
                        f"the MCP server {self.name!r} closed the connection during the call to "
                        f"{name}; it may or may not have taken effect"
                    ) from exc
        except MCPUnavailable as exc:
            raise ToolError(str(exc)) from exc

    async def aclose(self) -> None:
        """Stop what this process holds open to the server (a stdio server's process)."""
        await self._connection.aclose()


def mcp_tools(
    server: MCPServer,
    *,
    include: Iterable[str] | None = None,
    retry_safe: bool | Mapping[str, bool] | None = None,
    timeout_seconds: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    known_secrets: Iterable[str] = (),
) -> MCPToolbox:
    """The tools of ``server`` as a toolbox an agent takes like a :class:`ToolSet`.

    ``include`` offers only those tools (all by default). ``retry_safe`` overrides what the
    tools' annotations say: one value for all, or per tool name. ``timeout_seconds`` caps each
    call (the deployment's tool timeout caps it further); ``max_output_bytes`` caps what the
    model reads. ``known_secrets`` are masked in every result, on top of the server's
    credential headers and the usual shapes.
    """
    return MCPToolbox(
        server,
        include=None if include is None else tuple(include),
        retry_safe=retry_safe,
        timeout_seconds=timeout_seconds,
        max_output_bytes=max_output_bytes,
        known_secrets=tuple(known_secrets),
    )


class MCPToolbox:
    """An MCP server's tools. Implements :class:`~ackloop.tools.base.Toolbox`, plus the
    ``prepare()`` the engine awaits before reading the declarations (see :func:`mcp_tools`)."""

    def __init__(
        self,
        server: MCPServer,
        *,
        include: tuple[str, ...] | None,
        retry_safe: bool | Mapping[str, bool] | None,
        timeout_seconds: float | None,
        max_output_bytes: int,
        known_secrets: tuple[str, ...],
    ) -> None:
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise ValueError("timeout_seconds must be positive")
        if max_output_bytes < 256:
            raise ValueError("max_output_bytes must be at least 256")
        self.server = server
        self._include = include
        self._retry_safe = retry_safe
        self._timeout = timeout_seconds
        self._max_output_bytes = max_output_bytes
        self._known = (*known_secrets, *server.secrets())
        self._tools: ToolSet | None = None

    async def prepare(self) -> None:
        """List the server's tools, once: later calls return at once.

        Raises :class:`MCPUnavailable` (retryable) when the server cannot be listed and
        :class:`MCPToolsInvalid` (permanent) when what it lists cannot be offered.
        """
        if self._tools is None:
            listed = await self.server.list_tools()
            self._tools = ToolSet(self._select(listed), known_secrets=self._known)

    def declarations(self) -> list[JsonDict]:
        """The listed tools' declarations; none until :meth:`prepare` has listed them (the
        engine awaits it before a model step reads them, and fails that step if it cannot)."""
        return [] if self._tools is None else self._tools.declarations()

    def is_retry_safe(self, name: str) -> bool:
        return self._ready().is_retry_safe(name)

    async def execute(self, call: FunctionCall, context: ToolContext) -> ToolOutcome:
        """Run ``call`` on the server; every failure is an outcome for the model."""
        try:
            await self.prepare()
        except (MCPUnavailable, MCPToolsInvalid) as exc:
            return error_outcome(str(exc), known=self._known)
        return await self._ready().execute(call, context)

    def _ready(self) -> ToolSet:
        if self._tools is None:
            raise RuntimeError(f"the tools of MCP server {self.server.name!r} are not listed "
                               "yet: await prepare() first")
        return self._tools

    def _select(self, listed: list[ListedTool]) -> list[Tool]:
        by_name = {item.name: item for item in listed}
        wanted = list(by_name) if self._include is None else list(self._include)
        missing = [name for name in wanted if name not in by_name]
        if missing:
            raise MCPToolsInvalid(
                f"MCP server {self.server.name!r} lists no tool named {', '.join(missing)}; "
                f"it lists {', '.join(by_name) or 'none'}"
            )
        per_tool = self._retry_safe if isinstance(self._retry_safe, Mapping) else {}
        unknown = sorted(set(per_tool) - set(wanted))
        if unknown:
            raise MCPToolsInvalid(f"retry_safe names tools that are not offered: {unknown}")
        return [self._tool(by_name[name], per_tool.get(name)) for name in wanted]

    def _tool(self, listed: ListedTool, retry_safe: bool | None) -> Tool:
        if retry_safe is None:
            retry_safe = (self._retry_safe if isinstance(self._retry_safe, bool)
                          else _annotated_retry_safe(listed))
        try:
            parameters = json_schema_parameters(listed.input_schema)
            return _ServerTool(
                name=listed.name,
                description=listed.description or listed.title
                or f"The {listed.name} tool of {self.server.name}.",
                args_model=_ServerValidated,
                call=_caller(self.server, listed.name),
                retry_safe=retry_safe,
                timeout_seconds=self._timeout,
                max_output_bytes=self._max_output_bytes,
                parameters=parameters,
            )
        except (ValueError, SchemaError) as exc:
            raise MCPToolsInvalid(
                f"MCP server {self.server.name!r}: tool {listed.name!r} cannot be offered to "
                f"the model ({exc}); leave it out with include="
            ) from exc


class _ServerValidated(BaseModel):
    """An MCP tool's arguments, passed through as sent: the server validates them and says
    what is wrong in an ``isError`` result the model reads."""

    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class _ServerTool(Tool):
    """A tool whose declaration is the server's listed schema, flattened."""

    parameters: JsonDict | None = field(default=None)

    def declaration(self) -> JsonDict:
        declaration: JsonDict = {"name": self.name, "description": self.description}
        if self.parameters is not None:
            declaration["parameters"] = self.parameters
        return declaration


def _caller(server: MCPServer, name: str) -> Any:
    async def call(args: BaseModel, context: ToolContext) -> Any:
        result = await server.call_tool(
            name, dict(args.model_extra or {}), idempotency_key=context.idempotency_key
        )
        if result.is_error:
            raise ToolError(_text(result.content) or f"{name} reported an error")
        return _value(result)

    return call


def _annotated_retry_safe(listed: ListedTool) -> bool:
    hints = listed.annotations
    return hints is not None and bool(hints.read_only_hint or hints.idempotent_hint)


def _value(result: CallToolResult) -> Any:
    """The structured result when there is one (a lone ``{"result": x}`` is ``x``: the model
    reads it under ``result`` anyway), else the content as text. Images, audio and embedded
    blob resources are :class:`File` s: one alone is the result; with text or structured
    content, the result is the list of them in the content's order (text blocks as text)."""
    structured = result.structured_content
    if isinstance(structured, dict) and set(structured) == {"result"}:
        structured = structured["result"]
    files = [(n, found) for n, block in enumerate(result.content)
             if (found := _file(block)) is not None]
    if not files:
        return structured if structured is not None else _text(result.content)
    if structured is not None:
        return [structured, *(found for _, found in files)]
    if len(files) == 1 and len(result.content) == 1:
        return files[0][1]
    by_index = dict(files)
    return [by_index.get(n) or _text([block]) for n, block in enumerate(result.content)]


def _file(block: ContentBlock) -> File | None:
    """An image, audio or embedded blob resource block's bytes as a :class:`File`; None for
    any other block (or one whose base64 is not)."""
    try:
        if block.type in ("image", "audio"):
            return File(base64.b64decode(block.data, validate=True), block.mime_type)
        blob = getattr(block.resource, "blob", None) if block.type == "resource" else None
        if block.type == "resource" and isinstance(blob, str):
            resource = block.resource
            name = urlsplit(str(resource.uri)).path.rsplit("/", 1)[-1] or None
            return File(base64.b64decode(blob, validate=True),
                        resource.mime_type or "application/octet-stream", name)
    except (ValueError, TypeError, binascii.Error):
        return None
    return None


def _text(blocks: list[ContentBlock]) -> str:
    parts: list[str] = []
    for block in blocks:
        if block.type == "text":
            parts.append(block.text)
        elif block.type in ("image", "audio"):
            parts.append(f"[{block.mime_type} {block.type} omitted]")
        elif block.type == "resource":
            parts.append(getattr(block.resource, "text", None) or
                         f"[resource {block.resource.uri} omitted]")
        else:
            parts.append(f"[{block.type} {getattr(block, 'uri', '')}]".replace(" ]", "]"))
    return "\n".join(parts)


def _describe(exc: BaseException) -> str:
    """An exception in one line; a task group's group is described by its first member."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return f"no answer within {LIST_TIMEOUT_SECONDS:g} s"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _require_sdk() -> None:
    # find_spec, not import: the SDK takes seconds to import, paid only when a server is used.
    try:
        found = importlib.util.find_spec("mcp") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise MCPNotInstalled(_INSTALL_HINT)


class _Connection:
    """How calls get a connected client."""

    def client(self) -> AbstractAsyncContextManager[mcp.Client]:
        raise NotImplementedError

    def secrets(self) -> tuple[str, ...]:
        return ()

    async def aclose(self) -> None:
        return None


@dataclass(frozen=True)
class _StdioParams:
    command: str
    args: tuple[str, ...]
    env: dict[str, str]
    cwd: str | None


class _HttpSessions(_Connection):
    """A session per use (see :class:`MCPServer`)."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        self._url = url
        self._headers = headers

    def secrets(self) -> tuple[str, ...]:
        return tuple(value for key, value in self._headers.items() if is_secret_name(key))

    @asynccontextmanager
    async def client(self) -> AsyncIterator[mcp.Client]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        # The SDK's own client timeouts (30 s, 300 s for a stream); the tool's timeout cuts
        # a call sooner.
        timeout = httpx2.Timeout(30.0, read=300.0)
        async with (
            httpx2.AsyncClient(headers=self._headers, timeout=timeout) as http,
            Client(streamable_http_client(self._url, http_client=http)) as client,
        ):
            yield client


@dataclass
class _Running:
    """One started stdio server: its client, the task that owns the connection, and events
    for "stop" (asked) and "ended" (its output closed: the process has gone)."""

    client: mcp.Client
    owner: asyncio.Task[None]
    stop: asyncio.Event
    ended: asyncio.Event


class _SharedStdio(_Connection):
    """One server process per process and event loop, started on first use (see
    :class:`MCPServer`)."""

    def __init__(self, params: _StdioParams) -> None:
        self._params = params
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        self._running: _Running | None = None

    @asynccontextmanager
    async def client(self) -> AsyncIterator[mcp.Client]:
        yield await self._client()

    async def _client(self) -> mcp.Client:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # A new event loop (a test's, say): the old loop's tasks are gone with it.
            self._loop, self._lock, self._running = loop, asyncio.Lock(), None
        async with self._lock:
            running = self._running
            if running is None or running.ended.is_set() or running.owner.done():
                if running is not None:
                    log.warning("MCP server %s exited; starting it again", self._params.command)
                    await _stop(running)
                self._running = running = await self._start()
            return running.client

    async def _start(self) -> _Running:
        ready: asyncio.Future[mcp.Client] = asyncio.get_running_loop().create_future()
        stop, ended = asyncio.Event(), asyncio.Event()
        owner = asyncio.create_task(self._own(ready, stop, ended))
        try:
            client = await ready
        except BaseException:
            owner.cancel()
            raise
        return _Running(client, owner, stop, ended)

    async def _own(
        self, ready: asyncio.Future[mcp.Client], stop: asyncio.Event, ended: asyncio.Event
    ) -> None:
        """Hold the connection open until asked to stop: the SDK's client must be entered and
        left by one task, and a step's own task ends with its request."""
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(command=self._params.command, args=list(self._params.args),
                                       env=self._params.env or None, cwd=self._params.cwd)
        try:
            async with Client(_watched(stdio_client(params), ended)) as client:
                ready.set_result(client)
                await stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.warning("MCP server %s: %s", self._params.command, _describe(exc))
        finally:
            ended.set()

    async def aclose(self) -> None:
        running, self._running = self._running, None
        if running is not None and self._loop is asyncio.get_running_loop():
            await _stop(running)


async def _stop(running: _Running) -> None:
    running.stop.set()
    await asyncio.gather(running.owner, return_exceptions=True)


@asynccontextmanager
async def _watched(
    transport: AbstractAsyncContextManager[TransportStreams], ended: asyncio.Event
) -> AsyncIterator[TransportStreams]:
    """``transport``, with ``ended`` set when the server's output closes: how a shared
    connection learns, before its next call, that its server process has gone."""
    import anyio
    from mcp.shared.message import SessionMessage

    async with transport as (read, write):
        send, receive = anyio.create_memory_object_stream[SessionMessage | Exception](0)

        async def relay() -> None:
            async with send:
                async for item in read:
                    await send.send(item)
            ended.set()

        async with anyio.create_task_group() as group:
            group.start_soon(relay)
            ours: MemoryObjectReceiveStream[SessionMessage | Exception] = receive
            try:
                yield ours, write
            finally:
                group.cancel_scope.cancel()
