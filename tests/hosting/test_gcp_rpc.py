"""The retry policy of the direct calls (ackloop.gcp.rpc) reads a method config as
google-api-core does: its predicate's exception types, subclasses included, as status codes;
its backoff bounded as google-api-core's exponential sleep generator bounds it."""

from __future__ import annotations

from itertools import islice

import grpc
import pytest
from google.api_core import exceptions as gexc
from google.api_core import retry_async

from ackloop.gcp.rpc import RetryPolicy

Code = grpc.StatusCode
DELAYS = {"initial": 0.1, "maximum": 1.0, "multiplier": 2.0, "deadline": 5.0, "timeout": 5.0}


def test_a_policy_retries_the_codes_of_its_exception_types_and_their_subclasses() -> None:
    policy = RetryPolicy.of(gexc.Conflict, gexc.ServiceUnavailable, **DELAYS)
    # Aborted is a Conflict in google-api-core: its predicate would retry it too.
    assert policy.retryable == {Code.ABORTED, Code.ALREADY_EXISTS, Code.UNAVAILABLE}
    predicate = retry_async.if_exception_type(gexc.Conflict, gexc.ServiceUnavailable)
    for code in Code:
        assert predicate(gexc.from_grpc_status(code, "x")) == (code in policy.retryable), code


def test_the_delays_grow_to_their_maximum_each_drawn_below_its_bound() -> None:
    policy = RetryPolicy.of(gexc.ServiceUnavailable, **DELAYS)
    bounds = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for _ in range(50):
        delays = list(islice(policy.delays(), len(bounds)))
        assert all(0 <= d <= b for d, b in zip(delays, bounds, strict=True)), delays


def test_an_attempt_may_not_outlast_the_deadline() -> None:
    with pytest.raises(ValueError, match="within the deadline"):
        RetryPolicy.of(gexc.ServiceUnavailable, **(DELAYS | {"timeout": 6.0}))
