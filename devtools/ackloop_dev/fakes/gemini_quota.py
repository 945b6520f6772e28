"""A per-minute quota the fake Gemini server enforces the way the Gemini API does.

The Gemini API limits each project and model to so many requests and so many input tokens a
minute. A request over either limit is refused with a 429 ``RESOURCE_EXHAUSTED`` whose details
name the quota broken (``google.rpc.QuotaFailure``) and when to retry (``google.rpc.RetryInfo``,
``retryDelay``: whole seconds, rounded down, so a wait under a second reads ``"0s"``); the
message says the exact wait ("Please retry in 12.345s."). A refused request uses none of the
quota. Vertex AI's shared pool answers 429 with neither detail: ``style="vertex"``.

:class:`QuotaWindow` is that rule over a sliding window of the last 60 s: each admitted request
is kept with its input tokens until it is a minute old. Its limits can change while it serves
(``configure``): a capacity that shrinks and grows back during a run, as a shared pool's does.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from ackloop.domain.jsondict import JsonDict

QUOTA = "quota"
"""The kind a request refused by the quota is counted under in the server's ``faults_served``."""
STYLES = ("gemini-api", "vertex")
ROUNDINGS = ("floor", "ceil")
RATE_LIMITS_URL = "https://ai.google.dev/gemini-api/docs/rate-limits"
_METRICS = {
    "requests": ("generativelanguage.googleapis.com/generate_content_requests",
                 "GenerateRequestsPerMinutePerProjectPerModel"),
    "input_tokens": ("generativelanguage.googleapis.com/generate_content_input_token_count",
                     "GenerateContentInputTokensPerModelPerMinute"),
}


@dataclass(frozen=True)
class Refusal:
    """A request the quota refuses: the quota it would break, its limit, and how long until
    it would fit (seconds, exact)."""

    metric: str
    limit: int
    seconds: float


class QuotaWindow:
    """Requests and input tokens per minute over a sliding window; thread-safe.

    ``requests_per_minute`` or ``input_tokens_per_minute`` None: that limit is off (both off:
    every request is admitted). ``rounding`` is how ``retryDelay`` rounds the exact wait:
    ``floor`` as Gemini does, ``ceil`` for a server that never says ``"0s"``.
    """

    def __init__(self, requests_per_minute: int | None = None,
                 input_tokens_per_minute: int | None = None, *, style: str = "gemini-api",
                 rounding: str = "floor", window_seconds: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.window_seconds = window_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._admitted: deque[tuple[float, int]] = deque()  # (when, input tokens), oldest first
        self._tokens = 0
        self.refused = 0
        self.requests_per_minute: int | None = None
        self.input_tokens_per_minute: int | None = None
        self.style, self.rounding = "gemini-api", "floor"
        self.configure({"requests_per_minute": requests_per_minute,
                        "input_tokens_per_minute": input_tokens_per_minute,
                        "style": style, "rounding": rounding})

    @property
    def enabled(self) -> bool:
        return self.requests_per_minute is not None or self.input_tokens_per_minute is not None

    def configure(self, settings: JsonDict) -> JsonDict:
        """Apply an admin body (a key left out keeps its value); what is admitted stays in the
        window. Raises ``ValueError`` on a bad value. Returns :meth:`settings`."""
        limits = {}
        for key in ("requests_per_minute", "input_tokens_per_minute"):
            value = settings.get(key, getattr(self, key))
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{key} must be an integer >= 1, or null (no limit)")
            limits[key] = value
        style = settings.get("style", self.style)
        rounding = settings.get("rounding", self.rounding)
        if style not in STYLES:
            raise ValueError(f"style must be one of {', '.join(STYLES)}")
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {', '.join(ROUNDINGS)}")
        with self._lock:
            self.requests_per_minute = limits["requests_per_minute"]
            self.input_tokens_per_minute = limits["input_tokens_per_minute"]
            self.style, self.rounding = style, rounding
        return self.settings()

    def settings(self) -> JsonDict:
        return {"requests_per_minute": self.requests_per_minute,
                "input_tokens_per_minute": self.input_tokens_per_minute,
                "style": self.style, "rounding": self.rounding}

    def admit(self, tokens: int) -> Refusal | None:
        """Admit a request of ``tokens`` input tokens now (None), or refuse it."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            refusal = self._refusal(tokens, now)
            if refusal is not None:
                self.refused += 1
                return refusal
            self._admitted.append((now, tokens))
            self._tokens += tokens
            return None

    def stats(self) -> JsonDict:
        """The limits, what the last minute admitted, and the requests refused so far."""
        with self._lock:
            self._expire(self._clock())
            return {**self.settings(), "in_window": {"requests": len(self._admitted),
                                                     "input_tokens": self._tokens},
                    "refused": self.refused}

    def reset(self) -> None:
        with self._lock:
            self._admitted.clear()
            self._tokens, self.refused = 0, 0

    def _expire(self, now: float) -> None:
        while self._admitted and self._admitted[0][0] <= now - self.window_seconds:
            self._tokens -= self._admitted.popleft()[1]

    def _refusal(self, tokens: int, now: float) -> Refusal | None:
        waits: list[Refusal] = []
        rpm, tpm = self.requests_per_minute, self.input_tokens_per_minute
        if rpm is not None and len(self._admitted) >= rpm:
            # Room for one more once all but rpm - 1 of those admitted are a minute old.
            when = self._admitted[len(self._admitted) - rpm][0]
            waits.append(Refusal("requests", rpm, when + self.window_seconds - now))
        if tpm is not None and self._tokens + tokens > tpm:
            waits.append(Refusal("input_tokens", tpm, self._token_wait(tokens, tpm, now)))
        return max(waits, key=lambda r: r.seconds) if waits else None

    def _token_wait(self, tokens: int, limit: int, now: float) -> float:
        if tokens > limit:  # never fits: it is refused a minute at a time, as a full window is
            return self.window_seconds
        left = self._tokens
        for when, held in self._admitted:
            left -= held
            if left + tokens <= limit:
                return when + self.window_seconds - now
        return self.window_seconds

    def retry_delay(self, seconds: float) -> str:
        """``retryDelay`` as the quota's rounding writes it."""
        whole = math.floor(seconds) if self.rounding == "floor" else max(1, math.ceil(seconds))
        return f"{max(0, whole)}s"


def quota_error(window: QuotaWindow, refusal: Refusal, model: str) -> JsonDict:
    """The 429 body for ``refusal``, worded as the quota's ``style`` words it."""
    if window.style == "vertex":
        return {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": (
            "Resource exhausted. Please try again later. Please refer to "
            "https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more "
            "details.")}}
    metric, quota_id = _METRICS[refusal.metric]
    message = (f"You exceeded your current quota, please check your plan and billing details. "
               f"For more information on this error, head to: {RATE_LIMITS_URL}.\n"
               f"* Quota exceeded for metric: {metric}, limit: {refusal.limit}, model: {model}\n"
               f"Please retry in {max(0.0, refusal.seconds):.3f}s.")
    return {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": message,
                      "details": [
                          {"@type": "type.googleapis.com/google.rpc.QuotaFailure",
                           "violations": [{"quotaMetric": metric, "quotaId": quota_id,
                                           "quotaDimensions": {"location": "global",
                                                               "model": model},
                                           "quotaValue": str(refusal.limit)}]},
                          {"@type": "type.googleapis.com/google.rpc.Help",
                           "links": [{"description": "Learn more about Gemini API quotas",
                                      "url": RATE_LIMITS_URL}]},
                          {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                           "retryDelay": window.retry_delay(refusal.seconds)}]}}
