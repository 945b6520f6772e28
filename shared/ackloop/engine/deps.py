"""Everything a step handler needs, built once per process and passed in."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ackloop.agents.agent import AgentRegistry
from ackloop.bus.base import Publisher
from ackloop.bus.wakes import NoWaker, Waker
from ackloop.config.settings import Settings
from ackloop.domain.clock import Clock
from ackloop.engine.live_limits import Limits, LiveLimits
from ackloop.files import FileStore, MemoryFileStore
from ackloop.model.base import ModelClient
from ackloop.store import AgentStore

log = logging.getLogger(__name__)


@dataclass
class Deps:
    settings: Settings
    store: AgentStore
    publisher: Publisher
    model: ModelClient
    agents: AgentRegistry
    clock: Clock
    owner: str
    files: FileStore = field(default_factory=MemoryFileStore)
    """Where file bytes live (:mod:`ackloop.files`)."""
    waker: Waker = field(default_factory=NoWaker)
    """What publishes a message at its time (:mod:`ackloop.bus.wakes`): a call that sleeps
    is woken so; without one, the sweeper wakes it."""

    live_limits: LiveLimits = field(default_factory=LiveLimits)
    """The limits in force as this process last read them (:mod:`ackloop.engine.live_limits`)."""

    @property
    def limits(self) -> Limits:
        """The model quotas, concurrency limits and spend limits in force: as an operator set
        them while the deployment runs, else as declared."""
        return self.live_limits.of(self.settings)

    async def refresh_limits(self) -> None:
        """Read the limits set again when this process's reading is old enough, and wait."""
        await self.live_limits.refresh(self.settings, self.store, self.clock)

    def refresh_limits_soon(self) -> None:
        """Read the limits set again beside the work at hand when the reading is old enough."""
        self.live_limits.refresh_soon(self.settings, self.store, self.clock)

    async def limits_before_step(self) -> None:
        """The limits set, read for a step (:meth:`LiveLimits.before_step`)."""
        await self.live_limits.before_step(self.settings, self.store, self.clock)

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
