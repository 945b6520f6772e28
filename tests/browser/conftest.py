"""The run inspector in a real browser: Debian's Chromium, driven by Selenium, against a stack of
real processes on the emulators.

The browser comes from the distribution's packages (``apt-get install chromium
chromium-driver``), never from a download: the driver is named explicitly and Selenium Manager
runs offline. Without them the tests are SKIPPED, and the run says so loudly; in CI
(``CI=true``) a missing browser FAILS them instead.

Screenshots are test artefacts: ``test-artifacts/browser/`` in the checkout, or the directory
named by ``ACKLOOP_BROWSER_ARTIFACTS``; the run lists their paths at its end.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ackloop_dev.devstack.emulators import free_port
from ackloop_dev.devstack.processes import ManagedProcess
from ackloop_dev.devstack.stack import ackloop_command, project_root
from tests.support.emulators import EmulatorSession
from tests.support.stack import CHECKOUT, RunningStack, start_stack

WAIT_S = 90.0
"""Explicit waits: generous, for two shared cores running a whole stack and a browser."""
BEARER_TOKEN = "inspector-bearer-token-0123456789abcdef"
_SCREENSHOTS: list[Path] = []
_SKIPPED: list[str] = []


def _missing() -> str | None:
    """What the browser tests lack, in words a developer can act on (None: nothing)."""
    lacking = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if lacking:
        return (f"{' and '.join(lacking)} not found on PATH: install Debian's packages "
                "(apt-get install chromium chromium-driver)")
    return None


def artifacts_dir() -> Path:
    return Path(os.environ.get("ACKLOOP_BROWSER_ARTIFACTS")
                or CHECKOUT / "test-artifacts" / "browser")


@pytest.fixture(scope="session")
def browser_paths() -> tuple[str, str]:
    """Chromium and its driver, or a loud skip (a failure in CI)."""
    if reason := _missing():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser tests cannot run in CI: {reason}", pytrace=False)
        _SKIPPED.append(reason)
        pytest.skip(f"browser tests SKIPPED: {reason}")
    return str(shutil.which("chromium")), str(shutil.which("chromedriver"))


@dataclass
class Inspector:
    """A stack whose API serves the inspector, and what a test needs to drive it."""

    stack: RunningStack
    url: str
    """The API's base URL (the page is at ``{url}/ui``)."""
    token: str | None = None

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def start_run(self, text: str, agent: str, conversation_id: str | None = None) -> str:
        body: dict[str, Any] = {"text": text, "agent": agent}
        if conversation_id:
            body["conversation_id"] = conversation_id
        answer = self.api("POST", "/runs", json=body)
        assert answer.status_code == 202, answer.text
        run_id: str = answer.json()["run_id"]
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        answer = self.api("GET", f"/runs/{run_id}")
        assert answer.status_code == 200, answer.text
        view: dict[str, Any] = answer.json()
        return view


@pytest.fixture(scope="session")
def inspector(browser_paths: tuple[str, str], emulator_session: EmulatorSession,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Inspector]:
    """A stack serving the browser tests' agents, with Pub/Sub's fewest delivery attempts (5)
    at a tenth of production's backoff, so that a dead letter arises in seconds. One for the
    session: every module of pages that needs a stack shares it (its start is most of their
    time)."""
    running = start_stack(emulator_session, tmp_path_factory.mktemp("inspector"),
                          agents="tests.browser.agents:catalog", max_delivery_attempts=5,
                          push_time_scale=0.1)
    try:
        yield Inspector(running, f"http://127.0.0.1:{running.state.ports['api']}")
    finally:
        running.stop()


@contextlib.contextmanager
def bearer_api(inspector: Inspector, directory: Path, operators: str) -> Iterator[Inspector]:
    """A second API process on ``inspector``'s stack, with bearer auth (``BEARER_TOKEN``) and
    ``operators`` as its operators (``bearer``: its caller is one; empty: no one is)."""
    token_file = directory / "token"
    token_file.write_text(BEARER_TOKEN)
    stack, port = inspector.stack.stack, free_port()
    assert stack.state is not None
    env = {**os.environ, **stack.state.env, **stack.project_env(),
           "FUNCTION_TARGET": "api", "PORT": str(port), "ACKLOOP_HOST": "127.0.0.1",
           "ACKLOOP_API_AUTH": "bearer", "ACKLOOP_API_BEARER_TOKEN_FILE": str(token_file),
           "ACKLOOP_API_OPERATORS": operators}
    process = ManagedProcess("bearer-api", [*ackloop_command(), "run"], directory / "api.log",
                             f"http://127.0.0.1:{port}/healthz", env=env, cwd=project_root())
    process.start()
    try:
        process.wait_ready(60.0)
        yield Inspector(inspector.stack, f"http://127.0.0.1:{port}", BEARER_TOKEN)
    finally:
        process.stop()


@pytest.fixture(scope="module")
def bearer_inspector(inspector: Inspector, tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[Inspector]:
    """A second API process on the same stack, with bearer auth (its caller is an operator)."""
    with bearer_api(inspector, tmp_path_factory.mktemp("bearer-api"), "bearer") as api:
        yield api


@pytest.fixture
def slow_stream(inspector: Inspector) -> Iterator[None]:
    """The fake model streams 6 characters every 250 ms; back to its defaults afterwards."""
    admin = f"{inspector.stack.fake_gemini}/_admin"
    before = httpx.get(f"{admin}/stream", timeout=5).json()
    httpx.post(f"{admin}/stream", json={"delay": 0.25, "chunk_chars": 6},
               timeout=5).raise_for_status()
    try:
        yield
    finally:
        httpx.post(f"{admin}/stream", json=before, timeout=5).raise_for_status()
        httpx.post(f"{admin}/reset", timeout=5).raise_for_status()


@pytest.fixture
def driver(browser_paths: tuple[str, str], monkeypatch: pytest.MonkeyPatch,
           request: pytest.FixtureRequest) -> Iterator[Any]:
    """A headless Chromium of its own per test, 1280 x 900; a failed test leaves a screenshot
    of the page as it was."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    monkeypatch.setenv("SE_OFFLINE", "true")  # Selenium Manager must never download anything
    chromium, chromedriver = browser_paths
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1280,900", "--lang=en-US"):
        options.add_argument(argument)
    artifacts_dir().mkdir(parents=True, exist_ok=True)
    service = Service(executable_path=chromedriver,
                      log_output=str(artifacts_dir() / "chromedriver.log"))
    browser = webdriver.Chrome(options=options, service=service)
    try:
        yield browser
        if (report := getattr(request.node, "call_report", None)) and report.failed:
            path = artifacts_dir() / f"{request.node.name}-failure.png"
            browser.save_screenshot(str(path))
            _SCREENSHOTS.append(path)
    finally:
        browser.quit()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[pytest.TestReport]:
    """Keep the test's own outcome on its item, for the driver to screenshot a failure."""
    report: pytest.TestReport = yield
    if report.when == "call":
        item.call_report = report  # type: ignore[attr-defined]
    return report


@pytest.fixture
def screenshot(driver: Any) -> Callable[[str], Path]:
    """``screenshot(name)``: save the page as ``<artefacts>/<name>.png`` and list its path."""

    def take(name: str) -> Path:
        path = artifacts_dir() / f"{name}.png"
        assert driver.save_screenshot(str(path)), f"could not save {path}"
        _SCREENSHOTS.append(path)
        print(f"screenshot: {path}", file=sys.stderr)
        return path

    return take


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    if _SKIPPED:
        terminalreporter.write_sep("!", "BROWSER TESTS DID NOT RUN", red=True, bold=True)
        terminalreporter.write_line(f"browser tests SKIPPED: {_SKIPPED[0]}", red=True, bold=True)
    for path in dict.fromkeys(_SCREENSHOTS):
        terminalreporter.write_line(f"browser screenshot: {path}")
