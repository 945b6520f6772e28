"""What a chaos run injects and how much of it: the default and ``--quick`` configurations."""

from __future__ import annotations

from dataclasses import dataclass, field

from ackloop.engine.deps import FAULT_POINTS

MODEL_BURSTS = ("429:1*3", "500*3", "delay:3*2", "429:1*3", "500*3", "malformed")
"""Model-server fault bursts, served in this rotation (fake Gemini fault spec syntax)."""


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run. Every figure in the report is a function of these and the seed."""

    runs: int = 240
    """Agent runs in the fault phase."""
    concurrency: int = 16
    """Runs in flight at once."""
    kills_per_point: int = 3
    """SIGKILLs at each of the four fault points (call->commit, commit->publish; model, tool)."""
    kill_points: tuple[str, ...] = FAULT_POINTS
    model_bursts: tuple[str, ...] = MODEL_BURSTS
    burst_every_s: float = 6.0
    """Seconds between two model fault bursts."""
    concurrent_share: float = 0.5
    """Share of duplicated deliveries sent concurrently (the rest go one after the other)."""
    nws_error_rate: float = 0.15
    """Share of weather.gov requests answered with HTTP 500."""
    ipapi_timeout_rate: float = 0.2
    """Share of ip-api requests slower than the tool's HTTP timeout."""
    lease_seconds: float = 3.0
    model_timeout_s: float = 2.0
    model_delay_s: float = 3.0
    """How long a ``delay`` burst holds an answer (longer than ``model_timeout_s``)."""
    tool_timeout_s: float = 5.0
    """Tool budget; each HTTP phase gets half of it (2.5 s). Shorter budgets turn the machine's
    own load into unplanned tool timeouts (seen at 2 s on 2 busy cores), which would change
    answers for reasons the report does not count."""
    max_delivery_attempts: int = 20
    """Dead-letter policy of the step subscriptions during the fault phase."""
    dead_letter_attempts: int = 5
    """Dead-letter policy during the dead-letter phase (Pub/Sub's minimum)."""
    max_step_attempts: int = 60
    """Engine-side claim cap: above 2x the delivery attempts (the proxy doubles claims), so
    the dead-letter policy is what ends a run that keeps failing."""
    settle_timeout_s: float = 90.0
    """Bounded wait for every run to finish after the last one was submitted."""
    run_timeout_s: float = 120.0
    """A run not finished this long after its submission is reported stuck."""
    dead_letter_phase: bool = True
    temporal: bool = True
    temporal_kill_runs: int = 10
    seed: int = 7
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def kills(self) -> int:
        return self.kills_per_point * len(self.kill_points)

    @classmethod
    def quick(cls) -> ChaosConfig:
        """Small: about 2-3 minutes with the Temporal side, for CI."""
        return cls(
            runs=48,
            concurrency=12,
            kills_per_point=1,
            burst_every_s=5.0,
            settle_timeout_s=60.0,
            temporal_kill_runs=3,
        )
