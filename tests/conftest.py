"""Test tiers and the emulators.

- Unit tests run on the in-memory adapters: always.
- Tests marked ``emulator`` need the official Pub/Sub and Firestore emulators. They reuse the
  ones named by ``PUBSUB_EMULATOR_HOST``/``FIRESTORE_EMULATOR_HOST`` (``.ci/run`` starts them),
  or start them for the session. Without the jars they are SKIPPED, and the run says so loudly
  in its header and its summary: they never pass without running. In CI (``CI=true``) they
  FAIL instead, each at its setup: a CI run never goes green with the tier left out.
- The summary counts the emulator tests that ran, not those collected (``-m "not emulator"``
  deselects them all: the summary says none ran).
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from ackloop_dev.devstack import emulators
from tests.support.emulators import EmulatorSession
from tests.support.grpc_standin import StandIn, standin_server

_MISSING: str | None = None

TEST_EXTRAS = {"hypothesis": "dev", "schemathesis": "dev", "selenium": "dev",
               "pytest_timeout": "dev", "xdist": "dev", "hcl2": "infra", "mcp": "mcp",
               "pydantic_evals": "eval",
               "temporalio": "ackloop-dev[bench]"}
"""A module the tests import, by the extra that installs it (``make install-test``)."""


def missing_test_extras() -> list[str]:
    """The extras of :data:`TEST_EXTRAS` one of whose modules is not importable here."""
    return sorted({extra for module, extra in TEST_EXTRAS.items()
                   if importlib.util.find_spec(module) is None})


def pytest_configure(config: pytest.Config) -> None:
    global _MISSING
    if missing := missing_test_extras():
        pytest.exit(f"the tests need the extras {', '.join(missing)}, which `make install` "
                    "leaves out: run `make install-test` (then `make test-quick` or `make test`)",
                    returncode=pytest.ExitCode.USAGE_ERROR)
    if os.environ.get("PUBSUB_EMULATOR_HOST") and os.environ.get("FIRESTORE_EMULATOR_HOST"):
        return
    try:
        emulators.find_jars()
    except emulators.EmulatorsMissing as exc:
        _MISSING = str(exc)


def pytest_report_header(config: pytest.Config) -> str:
    if _MISSING:
        return f"!!! emulator tests SKIPPED: {_MISSING}"
    where = os.environ.get("PUBSUB_EMULATOR_HOST") or "started by the test session"
    return f"emulator tier: ON (Pub/Sub emulator: {where})"


QUICK_CHAOS_STARTS = "test_quick_chaos_leaves_only_its_dead_letter_backoff_to_wait_for"
QUICK_CHAOS_ENDS = "test_quick_chaos_on_the_shipped_numbers_meets_every_target"
"""The two tests of the quick chaos run (``tests/chaos/quick_run.py``), by name: the first
runs first, the second last."""

HEAVY = frozenset({"emulator", "slow", "browser"})
"""The marks of the tests that start processes of their own (a stack, a browser)."""

_COUNTS = {"selected": 0, "ran": 0}
"""The emulator tests left once every selection is done (each reports its setup, run or
skipped) and those that ran (their call phase happened): none selected, and the summary says
nothing of them. Counted from the reports, which ``pytest -n`` workers send to the process
that prints the summary."""


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``): there a tier that cannot run is a failure."""
    return os.environ.get("CI", "").lower() == "true"


@pytest.hookimpl(trylast=True)  # after -m and -k deselected what they do not select
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _quick_chaos_around_the_suite(items)
    if not _MISSING or in_ci():  # in CI, each fails at its setup (pytest_runtest_setup)
        return
    skip = pytest.mark.skip(reason=f"emulator tests SKIPPED: {_MISSING}")
    for item in items:
        if "emulator" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _MISSING and in_ci() and "emulator" in item.keywords:
        pytest.fail(f"emulator tests cannot run in CI (CI=true): {_MISSING}", pytrace=False)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "emulator" not in report.keywords:
        return
    if report.when == "setup":  # every selected test, whether it then runs or not
        _COUNTS["selected"] += 1
    elif report.when == "call":
        _COUNTS["ran"] += 1


def _quick_chaos_around_the_suite(items: list[pytest.Item]) -> None:
    """The quick chaos run's first test first and its last test last: the rest of the suite
    runs while the run waits out its dead-letter backoff (tests/chaos/quick_run.py). Right
    after the first come the files none of whose tests starts a process of its own (none marked
    ``emulator``, ``slow`` or ``browser``): under ``pytest -n`` they are what the other process
    runs beside the chaos run's active phases, which stacks of other tests would slow."""
    first = [i for i in items if i.name == QUICK_CHAOS_STARTS]
    last = [i for i in items if i.name == QUICK_CHAOS_ENDS]
    rest = [i for i in items if i.name not in (QUICK_CHAOS_STARTS, QUICK_CHAOS_ENDS)]
    if first:  # by file: under `pytest -n --dist loadfile` a file's tests go together
        heavy = {i.path for i in rest if HEAVY.intersection(i.keywords)}
        rest = [*[i for i in rest if i.path not in heavy], *[i for i in rest if i.path in heavy]]
    items[:] = [*first, *rest, *last]


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    selected, ran = _COUNTS["selected"], _COUNTS["ran"]
    if not selected:
        return
    if _MISSING:
        verb = "FAILED (CI=true)" if in_ci() else "SKIPPED"
        terminalreporter.write_sep("!", "EMULATOR TIER DID NOT RUN", red=True, bold=True)
        terminalreporter.write_line(f"emulator tests {verb}: {_MISSING}", red=True, bold=True)
    elif not ran:
        terminalreporter.write_line(f"emulator tier did not run: none of the {selected} "
                                    "emulator test(s) selected ran", yellow=True, bold=True)
    else:
        where = os.environ.get("PUBSUB_EMULATOR_HOST") or "started by the test session"
        terminalreporter.write_line(f"emulator tier ran: {ran} of {selected} emulator test(s) "
                                    f"selected ran (Pub/Sub emulator: {where})")


@pytest.fixture(scope="session")
def emulator_session() -> Iterator[EmulatorSession]:
    """The emulators for this session (reused if already running)."""
    directory = Path(tempfile.mkdtemp(prefix="ackloop-emulators-"))
    session = EmulatorSession.start(directory)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
async def standin(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[StandIn]:
    """A gRPC stand-in for Firestore and Pub/Sub (tests/support/grpc_standin.py): the clients made
    in the test reach it as their emulators."""
    async with standin_server() as server:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", server.address)
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", server.address)
        yield server
