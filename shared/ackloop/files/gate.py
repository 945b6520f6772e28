"""How many model requests with large inline files one process holds at once.

A model request that inlines a query's files holds their bytes several times over while it is
built and sent (the bytes read from the store, their base64 text, the request's JSON): about
70 MiB for the largest query (2 x 7 MiB). The model step serves up to 80 requests at once, so
an unbounded burst of such steps would take the instance past its memory. A step whose request
inlines more than :data:`LARGE_INLINE_BYTES` takes one of ``files_inline_concurrency`` slots
of its process first (:func:`hold`, called by :func:`ackloop.files.for_request` within a
:func:`scope`) and keeps it until its delivery ends; when none frees within
``files_inline_wait_seconds`` the step is released as retryable (Pub/Sub redelivers it later)
and nothing is lost. Outside a :func:`scope` (tests, a CLI), nothing is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from ackloop.domain.errors import RetryableError

LARGE_INLINE_BYTES = 1024 * 1024
"""A request inlining more file bytes than this takes a slot."""


@dataclass
class _Scope:
    slots: int
    wait_seconds: float
    held: asyncio.Semaphore | None = field(default=None)


_current: ContextVar[_Scope | None] = ContextVar("ackloop_inline_scope", default=None)
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, asyncio.Semaphore]]
_semaphores = weakref.WeakKeyDictionary()


def _semaphore(slots: int) -> asyncio.Semaphore:
    """The process's semaphore of ``slots`` (one per event loop: tests run several)."""
    per_loop = _semaphores.setdefault(asyncio.get_running_loop(), {})
    return per_loop.setdefault(slots, asyncio.Semaphore(slots))


@contextlib.asynccontextmanager
async def scope(slots: int, wait_seconds: float) -> AsyncIterator[None]:
    """A delivery during which a request with large inline files holds one of ``slots``
    (released when the delivery ends, however it ends)."""
    current = _Scope(slots, wait_seconds)
    token = _current.set(current)
    try:
        yield
    finally:
        _current.reset(token)
        if current.held is not None:
            current.held.release()


async def hold(inline_bytes: int) -> None:
    """Take a slot for a request inlining ``inline_bytes`` (a no-op for a small one, outside
    a :func:`scope`, or when this delivery holds one already). Raises
    :class:`~ackloop.domain.errors.RetryableError` when none frees within the scope's wait."""
    current = _current.get()
    if current is None or current.held is not None or inline_bytes <= LARGE_INLINE_BYTES:
        return
    semaphore = _semaphore(current.slots)
    try:
        await asyncio.wait_for(semaphore.acquire(), current.wait_seconds)
    except TimeoutError:
        raise RetryableError(
            f"{current.slots} model request(s) with large inline files are being sent by this "
            f"process; not waiting more than {current.wait_seconds:g} s",
            retry_after=current.wait_seconds) from None
    current.held = semaphore
