"""Fixtures for the HTTP API tests: a stack of real processes on the emulators, and clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack, stack_factory, start_stack

API_ENV = {
    "ACKLOOP_API_STREAM_POLL_SECONDS": "0.2",
    "ACKLOOP_API_QUERY_TIMEOUT_SECONDS": "20",
    "ACKLOOP_API_MAX_BODY_BYTES": "65536",
}


@pytest.fixture(scope="session")
def api_stack(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[RunningStack]:
    """One stack for the API tests; each test waits for the runs it starts."""
    running = start_stack(emulator_session, tmp_path_factory.mktemp("api-stack"),
                          extra_env=API_ENV)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
async def api(api_stack: RunningStack) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the stack's api service (a real process on 127.0.0.1)."""
    async with httpx.AsyncClient(base_url=api_stack.state.api_url, timeout=30) as client:
        yield client


@pytest.fixture
def fresh_stack(emulator_session: EmulatorSession, tmp_path: Path
                ) -> Iterator[Callable[..., RunningStack]]:
    """Start a stack of one's own (other settings): ``fresh_stack(**start_stack options)``."""
    with stack_factory(emulator_session, tmp_path, API_ENV) as make:
        yield make
