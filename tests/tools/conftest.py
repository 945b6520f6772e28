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


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    """Say it loudly when the MCP reference server's test could not run."""
    skipped = [str(report.longrepr) for report in terminalreporter.stats.get("skipped", [])
               if "MCP reference server SKIPPED" in str(report.longrepr)]
    if skipped:
        terminalreporter.write_sep("!", "MCP REFERENCE SERVER TEST DID NOT RUN", red=True,
                                   bold=True)
        reason = skipped[0][skipped[0].index("MCP reference server SKIPPED"):].removesuffix("')")
        terminalreporter.write_line(reason, red=True, bold=True)
