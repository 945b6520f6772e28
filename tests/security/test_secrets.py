"""A model upstream that echoes the API key in its errors (503, then 400): the key appears in
no log line of any process of the stack, no exported span (S9: span status and exception text
carried it into the trace files), no metric point, no document and no answer. Runs after the
fuzz and the poison tests of the tier, so every line they made the stack log is scanned too."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.security.conftest import SECRET_KEY
from tests.security.figures import FIGURES
from tests.security.probes import KeyReflectingUpstream, secret_hits
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.timeout(240)]


def test_a_reflected_key_is_nowhere(security_stack: RunningStack,
                                    reflecting_upstream: KeyReflectingUpstream) -> None:
    stack = security_stack
    marker = KeyReflectingUpstream.MARKER
    # One run from the queries topic, one through the HTTP API.
    published = stack.ask(f"{marker}: what is my ip address?",
                          request_id=f"sec-key-{time.time_ns()}")
    created = httpx.post(f"{stack.state.api_url}/runs", timeout=30,
                         json={"text": f"{marker}: weather alerts for CA"})
    FIGURES.requests += 1
    assert created.status_code == 202, created.text
    for run_id in (published, created.json()["run_id"]):
        run, _ = asyncio.run(stack.wait_run(run_id, timeout=150))
        assert run.status.value == "failed", run  # the upstream refused every call
    assert reflecting_upstream.reflected >= 2, "the upstream never echoed the key"

    hits = secret_hits(stack, [SECRET_KEY], answers=stack.pull_answers(timeout=5))
    FIGURES.leaked_secrets += len(hits)
    for hit in hits[:5]:
        FIGURES.sample(f"secret in {hit}")
    assert not hits, "the API key leaked:\n" + "\n".join(hits[:20])
