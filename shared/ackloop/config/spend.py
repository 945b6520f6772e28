"""A deployment's spend limits (``ACKLOOP_SPEND_LIMITS``): a dollar budget per key and period,
checked before each paid model call (:mod:`ackloop.engine.spend_limits`).

Given as a JSON list::

    [{"key": "owner", "period": "day", "usd": 5.0},
     {"key": "agent", "period": "hour", "usd": 20.0, "over": "fail"}]

- ``key``: whose spend it counts: ``owner``, ``agent``, ``tenant`` (the query's
  ``options.tenant``; a run without one is not limited by it) or ``deployment``;
- ``period``: ``hour`` or ``day`` (UTC), after which the budget is whole again;
- ``usd``: the budget;
- ``over``: what a call that would go over it does: ``wait`` (the default) for the next period,
  acknowledged, at no cost; or ``fail``: its run fails, saying which limit it met.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PERIOD_SECONDS = {"hour": 3600.0, "day": 86_400.0}


class SpendLimit(BaseModel):
    """One budget (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: Literal["owner", "agent", "tenant", "deployment"]
    period: Literal["hour", "day"] = "day"
    usd: float = Field(gt=0)
    over: Literal["wait", "fail"] = "wait"

    def period_of(self, now: float) -> tuple[float, float]:
        """The period ``now`` falls in: its start and its end (Unix seconds, UTC)."""
        length = PERIOD_SECONDS[self.period]
        start = now // length * length
        return start, start + length
