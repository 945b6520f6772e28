"""What a chaos run injects and how much of it: the default and ``--quick`` configurations.

Only the workload and the faults are chosen here. The engine and delivery numbers are the
shipped ones (:mod:`ackloop_dev.chaos.timing`); every duration below is given at production scale
and multiplied by the run's one time factor, ``time_scale``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ackloop_dev.chaos.timing import DEFAULT_FACTOR, Timing
from ackloop_dev.faults import FAULT_POINTS

MODEL_BURSTS = ("429:1*3", "500*3", "delay:hang*2", "429:1*3", "500*3", "malformed")
"""Model-server fault bursts, served in this rotation (fake Gemini fault spec syntax, seconds at
production scale; ``hang`` is half again the shipped model timeout, so the call times out)."""

CHILD_KILL_POINTS = ("tool:after_child", "model:after_call", "model:after_commit",
                     "tool:after_commit")
"""The points the child-runs scenario kills at, one per wave: between creating a child and
recording the wait, then the chaos run's own points where a tree's steps reach them (a
sub-agent's call runs no tool function, so ``tool:after_call`` is not among them)."""

STORM_RETRY_AFTER_S = (5.0, 15.0, 30.0, 60.0)
"""Retry-after of the storm's 429s (production seconds), drawn at random: Gemini's RetryInfo
says when the quota window reopens, from seconds to a minute. Those at or under the shipped
``retry_wait_seconds`` (20 s) are waited out in the request, the others left to redelivery."""


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run. Every figure in the report is a function of these and the seed."""

    runs: int = 240
    """Agent runs in the fault phase."""
    concurrency: int = 16
    """Runs in flight at once."""
    followup_every: int = 4
    """Every this-many-th run of the fault phase is a follow-up: asked in the conversation of the
    run submitted just before it, so it is queued behind it."""
    kills_per_point: int = 3
    """SIGKILLs at each of the four fault points (call->commit, commit->publish; model, tool)."""
    kill_points: tuple[str, ...] = FAULT_POINTS
    model_bursts: tuple[str, ...] = MODEL_BURSTS
    burst_every_s: float = 36.0
    """Production seconds between two model fault bursts."""
    concurrent_share: float = 0.5
    """Share of duplicated deliveries sent concurrently (the rest go one after the other)."""
    nws_error_rate: float = 0.15
    """Share of weather.gov requests answered with HTTP 500."""
    ipapi_timeout_rate: float = 0.2
    """Share of ip-api requests slower than the tool's HTTP timeout."""
    settle_s: float = 540.0
    """Production seconds to wait for every run to finish after the last one was submitted;
    a run still unfinished then is reported stuck."""
    followups: int = 2
    """Follow-up queries sent during the long run of the follow-up scenario."""
    storm_s: float = 600.0
    """Production seconds of the Gemini 429 storm (every model call answered 429)."""
    storm_runs: int = 12
    """Runs submitted during the storm, spread over its first four fifths."""
    storm_retry_after_s: tuple[float, ...] = STORM_RETRY_AFTER_S
    child_runs: int = 12
    """``research-team`` runs of the child-runs scenario (each starts two child runs), asked in
    one wave per point of ``child_kill_points``."""
    child_kill_points: tuple[str, ...] = CHILD_KILL_POINTS
    sleep_runs: int = 12
    """``follow-up`` runs of the sleeps scenario, each call sleeping ``sleep_s`` to
    ``sleep_s`` + 3 real seconds while what wakes it is killed (0: skipped)."""
    sleep_s: float = 5.0
    dead_letter_phase: bool = True
    temporal: bool = True
    temporal_kill_runs: int = 10
    seed: int = 7
    time_scale: float = 2 * DEFAULT_FACTOR
    """The one factor every duration is multiplied by (1: production time). The default run
    uses 1/3, not the 1/6 floor: the machine is not scaled, and at 1/6 (lease 1.67 s, a
    heartbeat due every 0.56 s) 240 runs 16 at a time on 2 CPUs saw 17 leases taken over from
    live holders whose heartbeat came late (duplicate model calls) and 12 runs stopped by their
    50 s budget; at 1/3 none (see docs/how-to/chaos.md)."""

    @property
    def kills(self) -> int:
        return self.kills_per_point * len(self.kill_points)

    def timing(self) -> Timing:
        return Timing.shipped(self.time_scale)

    @classmethod
    def quick(cls) -> ChaosConfig:
        """Small, for CI, at the 1/6 floor: the dead-letter path (ten deliveries of the shipped
        policy) bounds its wall time and everything else runs beside it. Eight runs at a time,
        so a 2-core machine keeps the 1.67 s lease's heartbeats on time (see ``time_scale``)."""
        return cls(
            runs=48,
            concurrency=8,
            kills_per_point=1,
            burst_every_s=30.0,
            storm_runs=6,
            child_runs=4,
            child_kill_points=("tool:after_child", "model:after_commit"),
            sleep_runs=6,
            temporal_kill_runs=3,
            time_scale=DEFAULT_FACTOR,
        )


def scaled_spec(spec: str, timing: Timing) -> str:
    """A fault spec with its seconds (``429:S``, ``delay:S``) scaled; ``hang`` is half again
    the shipped model timeout."""
    items = []
    for raw in spec.split(","):
        body, star, count = raw.strip().partition("*")
        kind, colon, value = body.partition(":")
        if colon and value == "hang":
            seconds = 1.5 * timing.model_timeout_s
            body = f"{kind}:{seconds:.3f}"
        elif colon and kind in ("429", "429-details", "delay"):
            body = f"{kind}:{timing.s(float(value)):.3f}"
        items.append(body + (star + count if star else ""))
    return ",".join(items)
