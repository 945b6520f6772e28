"""Everything a step handler needs, built once per process and passed in."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from ackloop.agents import AgentRegistry
from ackloop.bus.base import Publisher
from ackloop.clock import Clock
from ackloop.model.base import ModelClient
from ackloop.settings import Settings
from ackloop.store import AgentStore

log = logging.getLogger(__name__)

FAULT_POINTS = (
    "model:after_call",
    "model:after_commit",
    "tool:after_call",
    "tool:after_commit",
)


@dataclass
class FaultPoints:
    """Named crash points, for tests that must kill a process at an exact commit boundary.

    Configured with ``ACKLOOP_FAULT_CRASH_AT`` (comma-separated names from
    :data:`FAULT_POINTS`) and ``ACKLOOP_FAULT_MARKER_DIR``: the process SIGKILLs its group the
    first time it reaches a named point, after leaving a marker file so that the restarted
    process goes on. Off unless configured.
    """

    crash_at: frozenset[str] = frozenset()
    marker_dir: Path | None = None

    @classmethod
    def from_environment(cls) -> FaultPoints:
        names = os.environ.get("ACKLOOP_FAULT_CRASH_AT", "")
        points = frozenset(n.strip() for n in names.split(",") if n.strip())
        unknown = points - set(FAULT_POINTS)
        if unknown:
            raise ValueError(f"unknown fault points {sorted(unknown)}; known: {FAULT_POINTS}")
        marker = os.environ.get("ACKLOOP_FAULT_MARKER_DIR")
        return cls(points, Path(marker) if marker else None)

    def hit(self, name: str) -> None:
        if name not in self.crash_at:
            return
        if self.marker_dir is not None:
            marker = self.marker_dir / name.replace(":", "_")
            try:
                marker.open("x").close()
            except FileExistsError:
                return  # crashed here once already
        log.warning("fault point %s: killing this process group", name)
        # The whole group: a server's supervisor (gunicorn) would otherwise respawn the
        # worker in place, and the test wants the instance gone, as a crash would leave it.
        os.killpg(os.getpgrp(), signal.SIGKILL)


@dataclass
class Deps:
    settings: Settings
    store: AgentStore
    publisher: Publisher
    model: ModelClient
    agents: AgentRegistry
    clock: Clock
    owner: str
    faults: FaultPoints = field(default_factory=FaultPoints)

    def topic(self, logical: str) -> str:
        """Real topic name of a logical topic (``model_steps``, ``tool_steps``, ``answers``)."""
        s = self.settings
        return {
            "queries": s.queries_topic,
            "model_steps": s.model_steps_topic,
            "tool_steps": s.tool_steps_topic,
            "answers": s.answers_topic,
            "dead_letter": s.dead_letter_topic,
        }[logical]
