"""The emulator tier's gate (tests/conftest.py), as pytest runs it: without the emulators a
CI run (``CI=true``) fails and any other run skips them loudly; the summary counts the emulator
tests that ran, never those a ``-m`` left out."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.stack import CHECKOUT

PROBE = Path(__file__).parent / "support" / "tier_probe.py"
GONE = "/nonexistent/cloud-pubsub-emulator-all.jar"

pytestmark = pytest.mark.slow  # four pytest processes


def _pytest(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("CI", "PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST")}
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(PROBE), *args],
        cwd=CHECKOUT, env=clean | env, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[str, int]]:
    """Each run's output and exit code; started at once: each pays pytest's start."""
    hosts = {"PUBSUB_EMULATOR_HOST": "127.0.0.1:9", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:9"}
    started = {
        "ci": _pytest({"CI": "true", "ACKLOOP_PUBSUB_EMULATOR_JAR": GONE}),
        "local": _pytest({"ACKLOOP_PUBSUB_EMULATOR_JAR": GONE}),
        "deselected": _pytest(hosts, "-m", "not emulator"),
        "ran": _pytest(hosts),
    }
    return {name: (run.communicate(timeout=180)[0], run.returncode)
            for name, run in started.items()}


def test_without_the_emulators_ci_fails_and_a_local_run_skips_loudly(
        runs: dict[str, tuple[str, int]]) -> None:
    text, code = runs["ci"]
    assert code == 1, text
    assert "emulator tests cannot run in CI (CI=true): " in text and GONE in text
    assert "1 passed, 1 error" in text and "EMULATOR TIER DID NOT RUN" in text

    text, code = runs["local"]
    assert code == 0, text
    assert "1 passed, 1 skipped" in text
    assert "!!! emulator tests SKIPPED: " in text and "EMULATOR TIER DID NOT RUN" in text


def test_the_summary_counts_the_emulator_tests_that_ran(
        runs: dict[str, tuple[str, int]]) -> None:
    text, code = runs["deselected"]
    assert code == 0, text
    assert "1 passed, 1 deselected" in text
    assert "emulator tier ran" not in text and "did not run" not in text

    text, code = runs["ran"]
    assert code == 0, text
    assert "emulator tier ran: 1 of 1 emulator test(s) selected ran" in text
