"""Fault injection for the sandbox APIs: seeded 500s and slow answers, for chaos tests."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class Faults:
    """What to break, and how often. The default breaks nothing."""

    error_rate: float = 0.0
    """Share of requests answered with HTTP 500 (0.0-1.0)."""
    delay_seconds: float = 0.0
    """How long a delayed request sleeps before answering (longer than a client's timeout
    makes it time out)."""
    delay_rate: float = 1.0
    """Share of requests delayed by ``delay_seconds`` (only when ``delay_seconds`` > 0)."""
    seed: int = 0
    """Seed of the dice, so that a chaos run can be replayed."""
    paths: tuple[str, ...] = field(default_factory=tuple)
    """Path prefixes faults apply to (``/alerts``, ``/json``, ``/ip``); empty: all API paths."""

    def __post_init__(self) -> None:
        for name in ("error_rate", "delay_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        if self.delay_seconds < 0:
            raise ValueError("delay_seconds must not be negative")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Faults:
        """Read ``ACKLOOP_SANDBOX_ERROR_RATE``, ``..._DELAY_SECONDS``, ``..._DELAY_RATE``,
        ``..._SEED`` and ``..._FAULT_PATHS`` (comma-separated prefixes)."""
        env = os.environ if environ is None else environ
        prefix = "ACKLOOP_SANDBOX_"
        paths = env.get(f"{prefix}FAULT_PATHS", "")
        return cls(
            error_rate=float(env.get(f"{prefix}ERROR_RATE", "0")),
            delay_seconds=float(env.get(f"{prefix}DELAY_SECONDS", "0")),
            delay_rate=float(env.get(f"{prefix}DELAY_RATE", "1")),
            seed=int(env.get(f"{prefix}SEED", "0")),
            paths=tuple(p.strip() for p in paths.split(",") if p.strip()),
        )

    def updated(self, changes: Mapping[str, Any]) -> Faults:
        """A copy with ``changes`` (from ``POST /_admin/faults``) applied and validated."""
        known = {"error_rate", "delay_seconds", "delay_rate", "seed", "paths"}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown fault settings: {', '.join(sorted(unknown))}")
        values = dict(changes)
        if "paths" in values:
            values["paths"] = tuple(values["paths"])
        return replace(self, **values)

    def applies_to(self, path: str) -> bool:
        return not self.paths or any(path.startswith(prefix) for prefix in self.paths)


@dataclass(frozen=True)
class Decision:
    """What to do to one request."""

    fail: bool = False
    delay_seconds: float = 0.0


class FaultDice:
    """Seeded, thread-safe dice: the same seed and request order give the same faults."""

    def __init__(self, faults: Faults) -> None:
        self._lock = threading.Lock()
        self._faults = faults
        self._random = random.Random(faults.seed)

    @property
    def faults(self) -> Faults:
        return self._faults

    def reconfigure(self, faults: Faults) -> None:
        with self._lock:
            self._faults = faults
            self._random = random.Random(faults.seed)

    def roll(self, path: str, query: Mapping[str, str]) -> Decision:
        """Decide for one request; ``?fault=500`` or ``?delay=S`` in the query force a fault."""
        forced_fail = query.get("fault") == "500"
        forced_delay = float(query.get("delay", "0") or 0)
        with self._lock:
            faults = self._faults
            if not faults.applies_to(path):
                return Decision(fail=forced_fail, delay_seconds=forced_delay)
            delayed = faults.delay_seconds > 0 and self._random.random() < faults.delay_rate
            failed = faults.error_rate > 0 and self._random.random() < faults.error_rate
        return Decision(
            fail=forced_fail or failed,
            delay_seconds=max(forced_delay, faults.delay_seconds if delayed else 0.0),
        )
