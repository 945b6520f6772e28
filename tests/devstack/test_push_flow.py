"""Backoff and window arithmetic of the push delivery (no emulator)."""

from __future__ import annotations

import pytest

from ackloop.bus.delivery import PUSH_SERVICES, DeliveryPolicy, load_policy, parse_policy
from ackloop_dev.devstack.push_flow import (
    INITIAL_WINDOW,
    LINEAR_ABOVE,
    PAUSE_MAX_S,
    PAUSE_MIN_S,
    FlowControl,
    PushBackoff,
    PushWindow,
)


def test_the_policy_is_production_defaults() -> None:
    policy = load_policy()
    assert (policy.minimum_backoff_s, policy.maximum_backoff_s) == (10, 600)
    assert policy.max_delivery_attempts == 10
    assert {s: policy.ack_deadline_s(s) for s in PUSH_SERVICES} == {
        "ingest": 60, "model_step": 120, "tool_step": 90, "dead_letter": 60}
    assert policy.request_timeout_s["api"] == 360
    with pytest.raises(KeyError):
        policy.ack_deadline_s("api")  # not pushed to


def test_retry_delay_doubles_from_the_minimum_to_the_maximum() -> None:
    policy = load_policy()
    delays = [policy.retry_delay_s(n) for n in range(1, 11)]
    assert delays == [10, 20, 40, 80, 160, 320, 600, 600, 600, 600]
    assert policy.retry_delay_s(10_000) == 600
    with pytest.raises(ValueError):
        policy.retry_delay_s(0)


def test_a_zero_minimum_backoff_redelivers_at_once() -> None:
    policy = DeliveryPolicy(0, 600, 5, {})
    assert [policy.retry_delay_s(n) for n in (1, 5)] == [0, 0]


def test_time_scale_multiplies_every_duration_and_no_count() -> None:
    policy = load_policy().scaled(0.01)
    assert (policy.minimum_backoff_s, policy.maximum_backoff_s) == pytest.approx((0.1, 6.0))
    assert policy.ack_deadline_s("model_step") == pytest.approx(1.2)
    assert policy.max_delivery_attempts == 10
    assert policy.retry_delay_s(3) == pytest.approx(0.4)
    with pytest.raises(ValueError):
        load_policy().scaled(0)


@pytest.mark.parametrize("change", [
    {"max_delivery_attempts": 4},
    {"max_delivery_attempts": 101},
    {"retry_policy": {"minimum_backoff_seconds": 20, "maximum_backoff_seconds": 10}},
    {"retry_policy": {"minimum_backoff_seconds": 10, "maximum_backoff_seconds": 601}},
    {"request_timeout_seconds": {"ingest": 5, "model_step": 120, "tool_step": 90,
                                 "dead_letter": 60}},
])
def test_numbers_outside_pubsubs_limits_are_refused(change: dict[str, object]) -> None:
    raw: dict[str, object] = {
        "retry_policy": {"minimum_backoff_seconds": 10, "maximum_backoff_seconds": 600},
        "max_delivery_attempts": 10,
        "request_timeout_seconds": {"ingest": 60, "model_step": 120, "tool_step": 90,
                                    "dead_letter": 60},
    }
    parse_policy(raw)
    with pytest.raises(ValueError, match=r"delivery\.json"):
        parse_policy(raw | change)


def test_the_window_starts_small_and_doubles_per_round_of_successes() -> None:
    window = PushWindow()
    assert window.limit == INITIAL_WINDOW
    for _ in range(INITIAL_WINDOW):  # one round: every outstanding push answered 2xx
        window.succeeded()
    assert window.limit == 2 * INITIAL_WINDOW


def test_a_failure_halves_the_window_once_per_round_and_never_below_one() -> None:
    window = PushWindow(size=16)
    started = window.round
    assert window.failed(started) and window.limit == 8
    assert not window.failed(started), "a second failure of the same round counts once"
    assert window.limit == 8
    for _ in range(10):
        window.failed(window.round)
    assert window.limit == 1


def test_above_the_threshold_growth_is_linear_and_a_failure_falls_back_to_it() -> None:
    window = PushWindow(size=LINEAR_ABOVE)
    for _ in range(LINEAR_ABOVE):  # one window's worth of successes adds one
        window.succeeded()
    assert window.size == pytest.approx(LINEAR_ABOVE + 1, abs=0.01)
    window.failed(window.round)
    assert window.limit == LINEAR_ABOVE


def test_push_backoff_doubles_from_100_ms_to_60_s_and_a_success_resets_it() -> None:
    backoff = PushBackoff()
    pauses = [backoff.failed() for _ in range(12)]
    assert pauses[:3] == pytest.approx([PAUSE_MIN_S, 2 * PAUSE_MIN_S, 4 * PAUSE_MIN_S])
    assert max(pauses) == PAUSE_MAX_S and pauses[-1] == PAUSE_MAX_S
    backoff.succeeded()
    assert backoff.failed() == pytest.approx(PAUSE_MIN_S)
    assert PushBackoff(time_scale=0.5).failed() == pytest.approx(PAUSE_MIN_S / 2)


def test_flow_control_holds_pushes_to_the_window_and_the_pause() -> None:
    flow = FlowControl()
    rounds = [flow.started() for _ in range(INITIAL_WINDOW)]
    assert not flow.may_start(0.0), "the window is full"
    flow.finished(False, rounds[0], now=100.0)
    assert flow.in_flight == INITIAL_WINDOW - 1 and flow.window.limit == 1
    assert not flow.may_start(100.0)
    flow.finished(False, rounds[1], now=100.0)  # same round: no second halving or pause
    flow.finished(True, rounds[2], now=100.0)
    assert flow.in_flight == 0 and flow.window.limit == 2
    assert not flow.may_start(100.0 + PAUSE_MIN_S / 2), "paused after the failure"
    assert flow.may_start(100.0 + PAUSE_MIN_S)
