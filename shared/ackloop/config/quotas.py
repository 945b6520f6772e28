"""A deployment's model quotas (``ACKLOOP_MODEL_QUOTAS``): what each Gemini model it calls may
be asked per minute, shared by every process (:mod:`ackloop.engine.quota`).

Given as a JSON list, one object per model (Terraform's ``model_quotas``)::

    [{"model": "gemini-3-flash-preview", "rpm": 1000, "tpm": 1000000, "mode": "fixed"}]

- ``model``: the model name the agents call (``*``: any model no other entry names);
- ``location``: the Vertex AI location the quota is counted in (a quota is per project, model
  and location); informative on the Gemini API;
- ``rpm`` / ``tpm``: requests and input tokens per minute (either may be left out: not
  limited);
- ``mode``: ``fixed``, for the Gemini API's tiers and Provisioned Throughput (the limits are
  what the server enforces), or ``adaptive``, for Vertex AI's shared pool (the limits are a
  ceiling: a 429 lowers them, and they climb back while none comes);
- ``headroom``: the fraction kept under the limits (default 0.02: 2 %);
- ``shards``: documents the limiter's log is split over (default: enough that none is
  written more than about once a second at the full rate).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

QuotaMode = Literal["fixed", "adaptive"]
ANY_MODEL = "*"
WRITES_PER_SECOND = 1.0
"""What Firestore sustains on one document (its guidance): the shards are sized to it."""


class ModelQuota(BaseModel):
    """One model's quota (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._\-*/@]+$")
    location: str | None = Field(default=None, max_length=60, pattern=r"^[a-z0-9\-]+$")
    rpm: int | None = Field(default=None, ge=1)
    tpm: int | None = Field(default=None, ge=1)
    mode: QuotaMode = "fixed"
    headroom: float = Field(default=0.02, ge=0.0, lt=0.9)
    shards: int | None = Field(default=None, ge=1, le=200)

    @model_validator(mode="after")
    def _limits_something(self) -> ModelQuota:
        if self.rpm is None and self.tpm is None:
            raise ValueError(f"the quota of {self.model} limits nothing: give rpm, tpm or both")
        return self

    @property
    def quota_id(self) -> str:
        """The limiter's name for it: the model and the location (a document id)."""
        name = "any" if self.model == ANY_MODEL else self.model.replace("/", "_")
        return f"{name}@{self.location or 'default'}"

    @property
    def writes_per_call(self) -> int:
        """Shard writes one call makes: its reservation, and its tokens' correction when
        tokens are limited."""
        return 2 if self.tpm is not None else 1

    @property
    def shard_count(self) -> int:
        """The shards' number: as given, else enough that each is written at most
        :data:`WRITES_PER_SECOND` at the full request rate (one, without a request limit)."""
        if self.shards is not None:
            return self.shards
        if self.rpm is None:
            return 1
        return max(1, math.ceil(self.rpm * self.writes_per_call / 60.0 / WRITES_PER_SECOND))


def quota_for(quotas: list[ModelQuota], model: str) -> ModelQuota | None:
    """The quota a call to ``model`` counts against: the entry naming it, else ``*``'s."""
    named = next((q for q in quotas if q.model == model), None)
    return named or next((q for q in quotas if q.model == ANY_MODEL), None)
