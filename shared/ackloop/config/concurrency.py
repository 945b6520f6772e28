"""A deployment's concurrency limits (``ACKLOOP_CONCURRENCY_LIMITS``): at most N model steps or
tool calls at once per key, shared by every process (:mod:`ackloop.engine.concurrency`).

Given as a JSON list::

    [{"steps": "model", "key": "owner", "limit": 2},
     {"steps": "all", "key": "tenant", "limit": 20}]

- ``steps``: what a slot is held for: ``model`` (a model step's call), ``tool`` (a tool
  call), ``all`` (either), or ``runs`` (a run at work: taken by its first step, kept by each
  step after it and while they work, given back when the run ends, or
  :data:`~ackloop.domain.slots.HOLD_SECONDS` after its last step while it waits: so at most N
  runs of a key are at work at once);
- ``key``: who shares the N slots: ``owner`` (the caller who asked the run), ``agent``,
  ``tenant`` (the query's ``options.tenant``; a run asked without one is not limited by it),
  or ``deployment`` (everyone);
- ``limit``: N.

A tool declares a limit of its own with ``@tool(concurrency=("an-api", 3))``: at most 3 calls
of the tools naming ``an-api`` at once, across every run.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

StepsLimited = Literal["model", "tool", "all", "runs"]
KeyedBy = Literal["owner", "agent", "tenant", "deployment"]


class ConcurrencyLimit(BaseModel):
    """One limit (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: StepsLimited = "all"
    key: KeyedBy
    limit: int = Field(ge=1, le=100_000)

    def applies_to(self, kind: str) -> bool:
        """Whether a step of ``kind`` (model, tool) holds a slot of this limit (its own, or
        its run's)."""
        return self.steps in ("all", "runs", kind)

    @property
    def per_run(self) -> bool:
        """Whether its slots are held by runs, not steps."""
        return self.steps == "runs"
