"""The fake Gemini server's per-minute quota: a sliding window of requests and input tokens,
refused with a 429 as the Gemini API words it, read through the real google-genai client."""

from __future__ import annotations

import httpx
import pytest

from ackloop.domain.errors import ModelRetryableError
from ackloop.model.base import ModelRequest
from ackloop.model.gemini import GeminiModel
from ackloop_dev.fakes.gemini_quota import QuotaWindow, Refusal, quota_error
from ackloop_dev.fakes.gemini_server import FakeGeminiServer, server_from_args


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# (requests per minute, input tokens per minute, [(seconds after the first, tokens)], what
# each gets: None admitted, else (metric, exact wait))
CASES = [
    ("under both limits", 3, 100, [(0, 10), (1, 10), (2, 10)], [None, None, None]),
    ("the fourth request in a minute waits for the first to turn a minute old", 3, None,
     [(0, 1), (10, 1), (20, 1), (30, 1)], [None, None, None, ("requests", 30.0)]),
    ("a minute later there is room again", 2, None, [(0, 1), (5, 1), (60, 1), (61, 1)],
     [None, None, None, ("requests", 4.0)]),
    ("tokens: the wait is until enough of them are a minute old", None, 100,
     [(0, 60), (10, 30), (20, 50)], [None, None, ("input_tokens", 40.0)]),
    ("a refused request uses nothing of the quota", 2, None, [(0, 1), (1, 1), (2, 1), (3, 1)],
     [None, None, ("requests", 58.0), ("requests", 57.0)]),
    ("a request larger than the whole minute's tokens waits a minute, every time", None, 50,
     [(0, 80), (30, 80)], [("input_tokens", 60.0), ("input_tokens", 60.0)]),
    ("both limits broken: the longer wait", 2, 100, [(0, 10), (30, 85), (40, 20)],
     [None, None, ("input_tokens", 50.0)]),
    ("no limit: everything passes", None, None, [(0, 10**9)] * 3, [None, None, None]),
]


@pytest.mark.parametrize(("rpm", "tpm", "requests", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_window_admits_and_refuses_as_a_per_minute_quota(
        rpm: int | None, tpm: int | None, requests: list[tuple[float, int]],
        expected: list[tuple[str, float] | None]) -> None:
    clock = Clock()
    window = QuotaWindow(rpm, tpm, clock=clock)
    start = clock.now
    got: list[tuple[str, float] | None] = []
    for after, tokens in requests:
        clock.now = start + after
        refusal = window.admit(tokens)
        got.append(None if refusal is None else (refusal.metric, round(refusal.seconds, 6)))
    assert got == expected


@pytest.mark.parametrize(("rounding", "seconds", "delay"), [
    ("floor", 0.4, "0s"), ("floor", 12.9, "12s"), ("ceil", 0.4, "1s"), ("ceil", 12.1, "13s"),
    ("ceil", 0.0, "1s"), ("floor", 60.0, "60s"),
])
def test_retry_delay_rounds_as_configured(rounding: str, seconds: float, delay: str) -> None:
    assert QuotaWindow(1, rounding=rounding).retry_delay(seconds) == delay


@pytest.mark.parametrize("body", [
    {"requests_per_minute": 0}, {"requests_per_minute": "60"}, {"input_tokens_per_minute": True},
    {"style": "openai"}, {"rounding": "round"},
])
def test_a_bad_setting_is_refused_and_changes_nothing(body: dict[str, object]) -> None:
    window = QuotaWindow(60, 1000)
    with pytest.raises(ValueError):
        window.configure(body)
    assert window.settings() == {"requests_per_minute": 60, "input_tokens_per_minute": 1000,
                                 "style": "gemini-api", "rounding": "floor"}


def test_the_capacity_changes_while_it_serves_and_what_was_admitted_still_counts() -> None:
    clock = Clock()
    window = QuotaWindow(4, clock=clock)
    for _ in range(3):
        assert window.admit(1) is None
    window.configure({"requests_per_minute": 2})  # the pool shrank
    refusal = window.admit(1)
    assert refusal is not None and refusal.limit == 2 and refusal.seconds == 60.0
    window.configure({"requests_per_minute": 10})  # and grew back
    assert window.admit(1) is None
    assert window.stats()["in_window"] == {"requests": 4, "input_tokens": 4}
    assert window.stats()["refused"] == 1


def test_the_429_names_the_quota_and_when_to_retry_as_gemini_does() -> None:
    window = QuotaWindow(60, rounding="floor")
    body = quota_error(window, Refusal("requests", 60, 0.25), "gemini-x")
    error = body["error"]
    assert (error["code"], error["status"]) == (429, "RESOURCE_EXHAUSTED")
    assert "Please retry in 0.250s." in error["message"]
    failure, _help, retry = error["details"]
    assert failure["violations"][0]["quotaId"] == "GenerateRequestsPerMinutePerProjectPerModel"
    assert failure["violations"][0]["quotaDimensions"]["model"] == "gemini-x"
    assert retry == {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0s"}
    vertex = quota_error(QuotaWindow(60, style="vertex"), Refusal("requests", 60, 3.0), "m")
    assert "details" not in vertex["error"] and vertex["error"]["code"] == 429


REQUEST = ModelRequest(model="gemini-test", system_instruction="",
                       contents=[{"role": "user", "parts": [{"text": "tell me a joke"}]}])


async def test_the_real_client_meets_the_quota_and_reads_its_retry_delay() -> None:
    with FakeGeminiServer(quota=QuotaWindow(2, rounding="ceil")) as server:
        model = GeminiModel(api_key="k", base_url=server.url)
        await model.generate(REQUEST)
        await model.generate(REQUEST)
        with pytest.raises(ModelRetryableError) as caught:
            await model.generate(REQUEST)
        stats = server.stats()
    assert caught.value.retry_after is not None and 58 <= caught.value.retry_after <= 60
    assert stats["requests"] == 3 and stats["answered"] == 2
    assert stats["faults_served"] == {"quota": 1}
    assert stats["quota"]["in_window"]["requests"] == 2 and stats["quota"]["refused"] == 1


def test_the_quota_is_set_and_changed_over_http_and_from_the_command_line() -> None:
    server = server_from_args(["--quota-rpm", "60", "--quota-tpm", "1000000"])
    assert server.quota.settings()["requests_per_minute"] == 60
    with server:
        changed = httpx.post(f"{server.url}/_admin/quota",
                             json={"requests_per_minute": 20, "rounding": "ceil"})
        refused = httpx.post(f"{server.url}/_admin/quota", json={"requests_per_minute": -1})
        shown = httpx.get(f"{server.url}/_admin/quota").json()
    assert changed.status_code == 200 and changed.json()["requests_per_minute"] == 20
    assert refused.status_code == 400 and "requests_per_minute" in refused.text
    assert (shown["requests_per_minute"], shown["input_tokens_per_minute"], shown["rounding"]) == (
        20, 1_000_000, "ceil")
