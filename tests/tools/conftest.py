"""Shared fixtures for the tool layer's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ackloop.tools.base import ToolContext
from ackloop_dev.fakes.sandbox_apis import SandboxApis


@pytest.fixture
def context() -> ToolContext:
    return ToolContext(run_id="run-1", step_key="run-1:t1:c0", idempotency_key="run-1:t1:c0")


@pytest.fixture(scope="module")
def sandbox() -> Iterator[SandboxApis]:
    """One sandbox server per test module, counters reset by tests that read them."""
    with SandboxApis() as apis:
        yield apis
