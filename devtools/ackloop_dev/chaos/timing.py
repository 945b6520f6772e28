"""The shipped numbers a chaos run uses, and the one time factor applied to every duration.

Counts (a step's claims, a message's deliveries) come unchanged from what ships: the defaults
of :class:`ackloop.config.settings.Settings` and :func:`ackloop.bus.delivery.load_policy`. Every
duration
(the retry policy's backoff, the ack deadlines and request timeouts, the lease, the in-request
waits, the model and tool timeouts, the run's wall-clock budget, the sweeper's staleness and
schedule, and the chaos run's own injected delays and storm) is the shipped one multiplied by
one factor, :attr:`Timing.factor`, printed in the report. Nothing is tuned.

The factor cannot go below :func:`min_factor`: the engine refuses a request timeout under
``Settings.request_timeout_seconds``'s lower bound (10 s), and the shortest shipped request
timeout is 60 s, so the smallest factor is 1/6 (:data:`DEFAULT_FACTOR`, what ``--quick`` uses):
the most a run can be compressed without tuning a number. What the factor does not reach is
listed by :data:`UNSCALED`: the engine's own constants and the machine (process start,
Firestore latency).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ackloop.bus.delivery import PUSH_SERVICES, DeliveryPolicy, load_policy
from ackloop.config.settings import Settings
from ackloop.engine.lease import COMMIT_MARGIN_S
from ackloop_dev.devstack.stack import StackOptions

SWEEP_EVERY_S = StackOptions(directory=Path()).sweep_every_s or 60.0
"""How often production runs the sweeper: Cloud Scheduler's default schedule, ``* * * * *``
(``infra/variables.tf``), as the local stack's sweep job follows it."""

SCALED_SETTINGS = (
    "lease_seconds",
    "claim_wait_seconds",
    "retry_wait_seconds",
    "sweep_stale_seconds",
    "model_timeout_seconds",
    "tool_timeout_seconds",
    "default_max_seconds",
)
"""Settings that are durations and reach the functions through their environment (the request
timeout is per service: :meth:`Timing.service_env`)."""

UNSCALED = (
    f"engine constants: the {COMMIT_MARGIN_S:g} s kept at a request's end for the commit "
    "(engine/lease.py COMMIT_MARGIN_S), the model step's in-request backoff of 1..8 s for "
    "errors without a retry-after (engine/model_step.py), claim polls of 0.2..2 s",
    "the machine: process start after a kill, Firestore and Pub/Sub emulator latency",
)


def shipped_default(name: str) -> Any:
    """A setting's shipped default (not whatever this process's environment says)."""
    return Settings.model_fields[name].default


def _request_timeout_floor() -> float:
    """The smallest request timeout the engine accepts (the setting's lower bound)."""
    for rule in Settings.model_fields["request_timeout_seconds"].metadata:
        floor = getattr(rule, "ge", None)
        if floor is not None:
            return float(floor)
    return 0.0


def min_factor(policy: DeliveryPolicy | None = None) -> float:
    """The smallest factor that keeps every push service's request timeout acceptable."""
    policy = policy or load_policy()
    shortest = min(policy.request_timeout_s[name] for name in PUSH_SERVICES)
    return _request_timeout_floor() / shortest


DEFAULT_FACTOR = min_factor()


@dataclass(frozen=True)
class Timing:
    """The shipped numbers with every duration multiplied by ``factor``."""

    factor: float
    policy: DeliveryPolicy
    """The delivery policy, scaled (counts unchanged)."""
    settings: dict[str, float] = field(default_factory=dict)
    """The duration settings of :data:`SCALED_SETTINGS`, scaled."""
    max_step_attempts: int = 0
    lease_s: float = 0.0
    model_timeout_s: float = 0.0
    tool_timeout_s: float = 0.0

    @classmethod
    def shipped(cls, factor: float = DEFAULT_FACTOR) -> Timing:
        floor = min_factor()
        if factor < floor - 1e-9:
            raise ValueError(
                f"time factor {factor:g} is below {floor:.4g}: a request timeout would fall under "
                f"the engine's floor of {_request_timeout_floor():g} s")
        settings = {name: float(shipped_default(name)) * factor for name in SCALED_SETTINGS}
        return cls(
            factor=factor,
            policy=load_policy().scaled(factor),
            settings=settings,
            max_step_attempts=int(shipped_default("max_step_attempts")),
            lease_s=settings["lease_seconds"],
            model_timeout_s=settings["model_timeout_seconds"],
            tool_timeout_s=settings["tool_timeout_seconds"],
        )

    def s(self, production_seconds: float) -> float:
        """A duration given at production scale, scaled."""
        return production_seconds * self.factor

    # -- the shipped numbers, scaled ---------------------------------------------------------

    @property
    def sweep_every_s(self) -> float:
        return self.s(SWEEP_EVERY_S)

    @property
    def max_delivery_attempts(self) -> int:
        return self.policy.max_delivery_attempts

    def request_timeout_s(self, service: str) -> float:
        return self.policy.request_timeout_s[service]

    # -- bounds that follow from them -----------------------------------------------------------

    def backoff_sum_s(self, failed_deliveries: int) -> float:
        """Retry backoff a message waits through before delivery ``failed_deliveries + 1``."""
        return sum(self.policy.retry_delay_s(n) for n in range(1, failed_deliveries + 1))

    @property
    def dead_letter_after_s(self) -> float:
        """Least time from a message's first delivery to its dead letter: the backoff between
        its ``max_delivery_attempts`` deliveries."""
        return self.backoff_sum_s(self.max_delivery_attempts - 1)

    @property
    def step_attempts_span_s(self) -> float:
        """Least time before a step that fails on every delivery is claimed once more than
        ``max_step_attempts`` allows (its run then fails): the backoff between those claims."""
        return self.backoff_sum_s(self.max_step_attempts)

    # -- what the processes get --------------------------------------------------------------

    def function_env(self) -> dict[str, str]:
        """``ACKLOOP_*`` variables of every function: the scaled duration settings."""
        return {f"ACKLOOP_{name.upper()}": f"{value:g}" for name, value in self.settings.items()}

    def service_env(self) -> dict[str, dict[str, str]]:
        """Each service's own request timeout (a push service's ack deadline too), scaled."""
        return {name: {"ACKLOOP_REQUEST_TIMEOUT_SECONDS": f"{self.request_timeout_s(name):g}"}
                for name in self.policy.request_timeout_s}

    def describe(self) -> str:
        """One line for the report."""
        if abs(self.factor - 1.0) < 1e-9:
            return "time factor 1: production durations"
        return (f"time factor {self.factor:.4g} (1/{1 / self.factor:.3g}): every shipped duration "
                "x this factor; counts as shipped")

    def as_dict(self) -> dict[str, Any]:
        p = self.policy
        return {
            "factor": round(self.factor, 6),
            "settings": {k: round(v, 4) for k, v in self.settings.items()},
            "request_timeout_s": {k: round(self.request_timeout_s(k), 4) for k in PUSH_SERVICES},
            "backoff_s": [round(p.minimum_backoff_s, 4), round(p.maximum_backoff_s, 4)],
            "max_delivery_attempts": p.max_delivery_attempts,
            "max_step_attempts": self.max_step_attempts,
            "sweep_every_s": round(self.sweep_every_s, 4),
            "dead_letter_after_s": round(self.dead_letter_after_s, 2),
            "step_attempts_span_s": round(self.step_attempts_span_s, 2),
            "unscaled": list(UNSCALED),
        }
