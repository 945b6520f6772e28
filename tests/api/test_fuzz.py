"""Schema-driven fuzzing: schemathesis generates requests from the served OpenAPI document,
valid and invalid, and every answer must be a documented status, never a 5xx.

Runs against the api process of a stack of its own (the fuzz starts real runs), with a short
query timeout so that generated ``query`` calls do not wait long.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.stack import RunningStack

schemathesis = pytest.importorskip(
    "schemathesis", reason="schemathesis is not installed (pip install schemathesis)")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = [pytest.mark.emulator, pytest.mark.slow]


@pytest.fixture(scope="module")
def fuzz_stack(emulator_session: Any, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[RunningStack]:
    from tests.api.conftest import API_ENV
    from tests.support.stack import start_stack

    env = API_ENV | {"ACKLOOP_API_QUERY_TIMEOUT_SECONDS": "1",
                     "ACKLOOP_API_STREAM_MAX_SECONDS": "3"}
    running = start_stack(emulator_session, tmp_path_factory.mktemp("fuzz"), extra_env=env)
    try:
        yield running
    finally:
        running.stop()


def test_no_input_makes_the_api_fail(fuzz_stack: RunningStack) -> None:
    schema = schemathesis.openapi.from_url(f"{fuzz_stack.state.api_url}/openapi.json")
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 32  # the runs API, approvals, events, Agent Runtime, sweep,
    # trace, inspector, a run's files, the evals, the agents, the schedules and the limits
    statuses: list[int] = []

    for operation in operations:
        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case: Any) -> None:
            statuses.append(case.call_and_validate(checks=checks, timeout=30).status_code)

        fuzz()
    # It did exercise the service: many calls, accepted ones and rejected ones.
    assert len(statuses) >= 80
    assert any(s < 300 for s in statuses) and any(400 <= s < 500 for s in statuses)
