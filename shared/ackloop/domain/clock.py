"""Time as a port, so leases and budgets can be tested without sleeping."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (wall clock: leases are compared across processes)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (a wait inside a request: a lease, a model's retry-after)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock tests move by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    async def sleep(self, seconds: float) -> None:
        """Time passes at once; other tasks still get their turn."""
        self._now += max(0.0, seconds)
        await asyncio.sleep(0)


class ShiftedClock(SystemClock):
    """The system's clock, moved on by hand: waits inside a request take real time, while a
    test jumps to the time a call sleeps until (:meth:`advance`)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += max(0.0, seconds)
