"""The security tier: one stack of real processes on the emulators, with shipped settings, whose
model upstream reflects the API key in its errors when asked to (see
:class:`tests.security.probes.KeyReflectingUpstream`).

At the end of the session the tier's figures are printed (and written as JSON to the file named
by ``ACKLOOP_SECURITY_FIGURES``, which is how ``python -m tests.security.report`` reads them).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security import figures
from tests.security.probes import KeyReflectingUpstream
from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack, start_stack

SECRET_KEY = "AIzaSy-security-tier-4f9e2c7a1b"
"""The stack's Gemini API key: it must appear in no log line, document or message."""


@pytest.fixture(scope="session")
def reflecting_upstream() -> Iterator[KeyReflectingUpstream]:
    upstream = KeyReflectingUpstream()
    try:
        yield upstream
    finally:
        upstream.close()


@pytest.fixture(scope="session")
def security_stack(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory,
                   reflecting_upstream: KeyReflectingUpstream) -> Iterator[RunningStack]:
    """Shipped settings; only the model endpoint and its key are this tier's. The stack has a
    project of its own (as every stack of :func:`start_stack`): the fuzz tests walk every
    document of the stack's collections around each request, in time that would otherwise grow
    with everything the session wrote."""
    env = {"ACKLOOP_GEMINI_BASE_URL": reflecting_upstream.url,
           "ACKLOOP_GEMINI_API_KEY": SECRET_KEY}
    running = start_stack(emulator_session, tmp_path_factory.mktemp("security"), extra_env=env)
    reflecting_upstream.upstream = running.fake_gemini
    try:
        yield running
    finally:
        running.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    figures.dump()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    f = figures.FIGURES
    if not (f.requests or f.envelopes):
        return
    terminalreporter.write_sep("-", "security tier figures")
    for line in figures.lines(f):
        terminalreporter.write_line(line)
