"""Limits changed while the deployment runs: ``ackloop limits set`` and ``PUT /limits``.

The limits a deployment declares (``ACKLOOP_MODEL_QUOTAS``, ``ACKLOOP_CONCURRENCY_LIMITS``,
``ACKLOOP_SPEND_LIMITS``) are its defaults. An operator may set any of the three lists anew
without a redeploy: the lists set are one document (``limits/set``), which replaces the
declared list of each kind it names, until it is reset (``null``: the declared list again).

Every process reads that document when it starts (its first step waits for that reading) and
then at most once every ``limits_refresh_seconds`` (default 10 s), beside a step rather than in
its way, and keeps what it read (:class:`Seen`): a change reaches every process within that
time (and the step that started the reading), and a step pays nothing for it: no round trip,
no document of its own (a process reads one document every ``limits_refresh_seconds``).
``limits_refresh_seconds = 0`` never reads it: the declared limits alone hold, and a
deployment without limits reads nothing.

A change applies to what comes after it: a quota's places taken, a slot held, a budget's spend
this period are kept. A quota whose shard count changes (its ``rpm`` did) starts its new shards
empty: for the minute after, a call may be counted on both its old shard and its new one.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from ackloop.config.concurrency import ConcurrencyLimit
from ackloop.config.quotas import ModelQuota
from ackloop.config.settings import Settings
from ackloop.config.spend import SpendLimit
from ackloop.domain.clock import Clock
from ackloop.domain.errors import RetryableError
from ackloop.domain.jsondict import JsonDict
from ackloop.store import AgentStore

log = logging.getLogger(__name__)

KINDS = ("model_quotas", "concurrency_limits", "spend_limits")
"""The lists an operator may set, by their settings' names."""


class LimitsChange(BaseModel):
    """A change of the limits (``PUT /limits``'s body): each list given replaces the one in
    force; ``null`` goes back to the declared list; a list left out is left as it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_quotas: list[ModelQuota] | None = None
    concurrency_limits: list[ConcurrencyLimit] | None = None
    spend_limits: list[SpendLimit] | None = None


@dataclass(frozen=True)
class Limits:
    """The limits in force: each list as set, else as declared; who set the lists that are
    set, and when."""

    model_quotas: list[ModelQuota]
    concurrency_limits: list[ConcurrencyLimit]
    spend_limits: list[SpendLimit]
    set_lists: tuple[str, ...] = ()
    set_by: str | None = None
    set_at: float | None = None


@dataclass
class Seen:
    """What one process last read of the lists set, and when (its clock)."""

    doc: JsonDict | None = None
    read_at: float | None = None


@dataclass
class LiveLimits:
    """A process's view of the limits in force (on :class:`~ackloop.engine.deps.Deps`)."""

    seen: Seen = field(default_factory=Seen)
    pending: asyncio.Task[None] | None = None
    """The reading under way (:meth:`refresh_soon`)."""
    ready: bool = False
    """Whether the process's first reading is done (or failed: the declared limits hold)."""

    def of(self, settings: Settings) -> Limits:
        """The limits in force as this process last read them."""
        return in_force(settings, self.seen.doc if settings.limits_refresh_seconds > 0
                        else None)

    def started(self, now: float, doc: JsonDict | None = None) -> None:
        """Take ``doc`` as the process's first reading, made at ``now`` (a process started on
        a store known to hold it: the in-process loop's fresh store holds none)."""
        self.seen, self.ready = Seen(doc, now), True

    def due(self, settings: Settings, now: float) -> bool:
        """Whether this process's reading is ``limits_refresh_seconds`` old (or none yet)."""
        every, read_at = settings.limits_refresh_seconds, self.seen.read_at
        return every > 0 and (read_at is None or now - read_at >= every)

    async def refresh(self, settings: Settings, store: AgentStore, clock: Clock) -> None:
        """Read the lists set again when the reading is due (a store that cannot be read keeps
        the last reading: the step goes on under it). Awaited where the reading must be
        fresh: a process's start, ``GET /runs/{id}``."""
        now = clock.now()
        if not self.due(settings, now):
            return
        self.seen.read_at = now
        try:
            self.seen.doc = await store.quotas.read_set()
        except RetryableError as exc:
            log.warning("the limits set could not be read (%s): the last reading holds", exc)
        finally:
            self.ready = True

    def refresh_soon(self, settings: Settings, store: AgentStore, clock: Clock) -> None:
        """When the reading is due, read again beside the work at hand, not in its way. The
        reading is the process's, not a step's: it is not counted in a delivery's documents."""
        if self.pending is not None and not self.pending.done():
            return
        if not self.due(settings, clock.now()):
            return
        self.pending = asyncio.get_running_loop().create_task(
            self.refresh(settings, store, clock), context=contextvars.Context())

    async def before_step(self, settings: Settings, store: AgentStore, clock: Clock) -> None:
        """What a step does first: a process that has read nothing yet waits for its first
        reading (started when the process started); later, a due reading is started beside
        the step, which goes on under the last one."""
        self.refresh_soon(settings, store, clock)
        if not self.ready:
            await self.settled()

    async def settled(self) -> None:
        """Wait for the reading under way, if any."""
        if self.pending is not None:
            await asyncio.shield(self.pending)


def in_force(settings: Settings, doc: JsonDict | None) -> Limits:
    """The limits in force: the lists ``doc`` (``limits/set``) sets, else the declared ones.
    A list the document holds that no longer validates (written by another version) is
    ignored for the declared one, and said so."""
    lists: dict[str, Any] = {kind: list(getattr(settings, kind)) for kind in KINDS}
    given = (doc or {}).get("lists") or {}
    set_lists = []
    for kind in KINDS:
        if kind not in given:
            continue
        try:
            lists[kind] = getattr(LimitsChange.model_validate({kind: given[kind]}), kind)
            set_lists.append(kind)
        except ValueError as exc:
            log.warning("the %s set (limits/set) are not valid here (%s): the declared hold",
                        kind, exc)
    return Limits(**lists, set_lists=tuple(set_lists),
                  set_by=(doc or {}).get("by") if set_lists else None,
                  set_at=(doc or {}).get("at") if set_lists else None)


def changed(doc: JsonDict | None, change: LimitsChange, by: str, now: float) -> JsonDict:
    """The ``limits/set`` document after ``change`` (by ``by``, at ``now``). Pure."""
    lists = dict((doc or {}).get("lists") or {})
    for kind in change.model_fields_set:
        value = getattr(change, kind)
        if value is None:
            lists.pop(kind, None)
        else:
            lists[kind] = [item.model_dump(mode="json", exclude_none=True) for item in value]
    return {"lists": lists, "by": by, "at": now}


async def change(store: AgentStore, change: LimitsChange, by: str, now: float) -> JsonDict:
    """Write ``change`` (at the version read: two changes at once are both applied)."""

    def apply(data: JsonDict | None) -> tuple[JsonDict | None, JsonDict]:
        new = changed(data, change, by, now)
        return new, new

    return await store.quotas.change_set(apply)
