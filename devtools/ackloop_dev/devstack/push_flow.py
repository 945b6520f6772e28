"""Push flow control of one subscription: how many pushes may be outstanding, and when to pause.

The model is the one Google documents for push subscriptions ("Push subscriptions", sections
"Push backoff" and "Delivery rate", https://cloud.google.com/pubsub/docs/push):

* **Push window (delivery rate).** Pub/Sub limits the concurrent push requests of a
  subscription with a slow-start algorithm. The window starts at a small single-digit size,
  grows with every successful delivery and shrinks with every failure. While it is below 3,000
  outstanding messages it grows exponentially; above, linearly; a failure there brings it back
  to 3,000.
* **Push backoff.** When the endpoint sends negative acknowledgements (a non-2xx answer, or no
  answer before the ack deadline), Pub/Sub stops pushing any message of the subscription for
  a while, between 100 ms and 60 s, the pause growing exponentially with the failures. It is
  separate from a message's retry policy; when both apply, the longer delay wins.

What the documentation leaves open is filled in the way TCP's slow start (which the
documentation names) does it:

* the window starts at :data:`INITIAL_WINDOW`; each success adds one message (so the window
  doubles per round of answers) below :data:`LINEAR_ABOVE`, and ``1 / window`` above it;
* a failure halves the window (at least 1), or sets it to :data:`LINEAR_ABOVE` from above;
* failures of pushes that were started before the last reduction do not reduce again: a burst
  of failures from one round counts once (as TCP reduces once per window of losses);
* the pause is 100 ms doubled per consecutive counted failure, capped at 60 s; a success
  resets the count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INITIAL_WINDOW = 3
"""Pushes a subscription may have outstanding at first ("a small single-digit window")."""
LINEAR_ABOVE = 3000
"""Window above which growth is linear and to which a failure reduces it."""
PAUSE_MIN_S = 0.1
"""Push backoff after the first of a run of failures."""
PAUSE_MAX_S = 60.0
"""Longest push backoff."""


@dataclass
class PushWindow:
    """The slow-start window: how many pushes may be outstanding at once."""

    size: float = float(INITIAL_WINDOW)
    round: int = 0
    """Incremented at every reduction; a failure counts only if its push started in this round."""

    @property
    def limit(self) -> int:
        """Pushes that may be outstanding now."""
        return max(1, int(self.size))

    def succeeded(self) -> None:
        """A push was acknowledged: grow (exponentially per round below the threshold)."""
        self.size += 1.0 if self.size < LINEAR_ABOVE else 1.0 / self.size

    def failed(self, started_round: int) -> bool:
        """A push started in ``started_round`` failed. Returns whether it reduced the window
        (False for a failure from a round that was already answered by a reduction)."""
        if started_round != self.round:
            return False
        self.size = float(LINEAR_ABOVE) if self.size > LINEAR_ABOVE else max(1.0, self.size / 2)
        self.round += 1
        return True


@dataclass
class PushBackoff:
    """The subscription-wide pause after failures."""

    time_scale: float = 1.0
    """Multiplies every pause (the local stack's one time-scale factor)."""
    failures: int = 0
    """Consecutive counted failures since the last success."""

    def failed(self) -> float:
        """A counted failure: the seconds to pause every push of the subscription."""
        self.failures += 1
        doublings = min(self.failures - 1, 32)
        return min(PAUSE_MAX_S, PAUSE_MIN_S * 2.0**doublings) * self.time_scale

    def succeeded(self) -> None:
        """A success ends the run of failures."""
        self.failures = 0


@dataclass
class FlowControl:
    """Window, pause and outstanding pushes of one subscription."""

    time_scale: float = 1.0
    window: PushWindow = field(default_factory=PushWindow)
    backoff: PushBackoff = field(init=False)
    in_flight: int = 0
    paused_until: float = 0.0
    """Monotonic time before which no push may start."""

    def __post_init__(self) -> None:
        self.backoff = PushBackoff(self.time_scale)

    def may_start(self, now: float) -> bool:
        """Whether one more push may start at ``now``."""
        return self.in_flight < self.window.limit and now >= self.paused_until

    def started(self) -> int:
        """Count a push as outstanding; returns the round to pass to :meth:`finished`."""
        self.in_flight += 1
        return self.window.round

    def finished(self, ok: bool, started_round: int, now: float) -> None:
        """A push got its answer (``ok``: 2xx) or failed; adjust the window and the pause."""
        self.in_flight -= 1
        if ok:
            self.window.succeeded()
            self.backoff.succeeded()
        elif self.window.failed(started_round):
            self.paused_until = max(self.paused_until, now + self.backoff.failed())
