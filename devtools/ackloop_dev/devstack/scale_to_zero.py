"""Services that run only while they are used, as Cloud Run's do with no minimum instance.

A :class:`ScaledService` listens on a port of its own and starts its process (``ackloop run``)
when a connection arrives and none runs, holding the connection until the process accepts
connections on its own port, as Cloud Run holds a request while an instance starts (its default
start-up probe is a TCP one; ``ackloop run`` binds only once its dependencies are built). The
bytes are then relayed both ways. :meth:`ScaledService.scale_to_zero` stops the process and
closes its relayed connections, as an instance taken away after idling does; with ``idle_s``
that happens by itself after that long without a byte either way.

It lets the local stack show what a question costs when every service has scaled to zero (the
push delivery keeps its connections to it, as Pub/Sub keeps its own to Cloud Run's front end).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ackloop_dev.bench.procstats import tree_cpu_seconds
from ackloop_dev.devstack.processes import ManagedProcess

READY_POLL_S = 0.005
"""How often a starting process's port is tried."""


@dataclass(frozen=True)
class ColdStart:
    """One start of the process: spawn to its port accepting, and the CPU it used by then."""

    seconds: float
    cpu_s: float


@dataclass
class ScaledService:
    """A port that starts ``make()``'s process (listening on ``backend_port``) on demand."""

    name: str
    port: int
    backend_port: int
    make: Callable[[], ManagedProcess]
    idle_s: float | None = None
    start_timeout_s: float = 60.0
    cold_starts: list[ColdStart] = field(default_factory=list)
    _process: ManagedProcess | None = field(default=None, repr=False)
    _server: asyncio.Server | None = field(default=None, repr=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    _relayed: set[asyncio.StreamWriter] = field(default_factory=set, repr=False)
    _last_byte: float = field(default_factory=time.monotonic, repr=False)
    _idler: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        """Whether the process is up (it may still be starting)."""
        process = self._process
        return process is not None and process.process is not None and \
            process.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process else None

    async def listen(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", self.port)
        if self.idle_s is not None:
            self._idler = asyncio.create_task(self._idle_forever(self.idle_s))

    async def close(self) -> None:
        """Stop listening and stop the process."""
        if self._idler is not None:
            self._idler.cancel()
        if self._server is not None:
            self._server.close()
        await self.scale_to_zero()

    async def scale_to_zero(self) -> None:
        """Stop the process (SIGKILL: nothing it does then is waited for) and close every
        connection relayed to it."""
        for writer in list(self._relayed):
            writer.close()
        if self._process is not None:
            await asyncio.to_thread(self._process.kill)
            self._process = None

    async def _ensure_started(self) -> None:
        async with self._lock:
            if self.running:
                return
            began = time.monotonic()
            process = self._process = self.make().start()
            while True:
                assert process.process is not None and process.pid is not None
                if process.process.poll() is not None:
                    raise RuntimeError(process.failure())
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection("127.0.0.1", self.backend_port)
                    writer.close()
                    break
                if time.monotonic() - began > self.start_timeout_s:
                    raise RuntimeError(process.failure(self.start_timeout_s))
                await asyncio.sleep(READY_POLL_S)
            took = time.monotonic() - began
            self.cold_starts.append(ColdStart(round(took, 3),
                                              round(tree_cpu_seconds(process.pid), 3)))

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._relayed.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            await self._ensure_started()
            up_reader, upstream = await asyncio.open_connection("127.0.0.1", self.backend_port)
            self._relayed.add(upstream)
            await asyncio.gather(self._pipe(reader, upstream), self._pipe(up_reader, writer))
        except (OSError, RuntimeError):
            pass  # the client sees its connection closed, as when an instance fails to start
        finally:
            for end in (writer, upstream):
                if end is not None:
                    self._relayed.discard(end)
                    end.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                self._last_byte = time.monotonic()
                writer.write(data)
                await writer.drain()
        finally:
            writer.close()

    async def _idle_forever(self, idle_s: float) -> None:
        while True:
            await asyncio.sleep(min(idle_s, 1.0))
            if self.running and time.monotonic() - self._last_byte >= idle_s:
                await self.scale_to_zero()
