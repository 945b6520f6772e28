"""The limiter's log of a model quota, kept on shards (``quotas/{quota}-{shard}``, the store's
:class:`~ackloop.store.quota.Quotas`; the arithmetic :mod:`ackloop.domain.quota`'s).

A shard document holds the calls made or reserved in the last minute on its part of the quota
(``entries``: holder, slot, input tokens, whether the holder waits for it), when a 429 asked
every call to wait (``paused_until``), and, for an adaptive quota, the share of the declared
limits it allows now (``scale``). A run's calls all go to one shard (by its id), so a call finds
there the place it took on an earlier delivery: a holder never takes two places
(:meth:`Shard.held`), and two deliveries never build on one reading (the store writes at the
version read). Each reading of the shard is judged at the time of that reading: a change that a
burst of writers made wait (each refused write reads again) puts its call's place at the time it
is written, not when it first asked, since the server counts the call when it comes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ackloop.domain.clock import Clock
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.quota import (
    Entry,
    Limits,
    Scale,
    fitting_share,
    in_line,
    live,
    pause,
    position,
)
from ackloop.store import AgentStore


@dataclass(frozen=True)
class Place:
    """A call's place under a quota: its slot, the calls ahead of it, and whether this call
    took it now (False: a delivery before took it)."""

    at: float
    ahead: int
    taken_now: bool


@dataclass(frozen=True)
class Call:
    """A call asking for a place: who holds it, its input tokens (estimated), whose it is
    (fairness's key) and its priority."""

    holder: str
    tokens: int
    key: str = ""
    priority: int = 0


@dataclass(frozen=True)
class Shard:
    """One shard as read: its live entries, its pause and its adaptive scale."""

    entries: tuple[Entry, ...] = ()
    paused_until: float = 0.0
    scale: Scale = field(default_factory=Scale)
    paused_for: float = 0.0
    """The length of the last pause (:func:`~ackloop.domain.quota.pause`)."""

    @classmethod
    def of(cls, data: JsonDict | None, now: float) -> Shard:
        if data is None:
            return cls()
        raw = data.get("entries")
        entries = tuple(live((Entry(str(e["h"]), float(e["at"]), int(e.get("t", 0)),
                                    bool(e.get("w", False)), str(e.get("k", "")),
                                    int(e.get("p", 0)), float(e.get("s", 0.0)))
                              for e in raw if isinstance(e, dict))
                             if isinstance(raw, list) else (), now))
        paused, length = data.get("paused_until"), data.get("paused_for")
        return cls(entries, float(paused) if isinstance(paused, int | float) else 0.0,
                   Scale.of(data.get("scale")),
                   float(length) if isinstance(length, int | float) else 0.0)

    def doc(self) -> JsonDict:
        return {"entries": [{"h": e.holder, "at": e.at, "t": e.tokens, "w": e.waited,
                             "k": e.key, "p": e.priority, "s": e.since}
                            for e in self.entries],
                "paused_until": self.paused_until, "scale": self.scale.doc(),
                "paused_for": self.paused_for}

    def held(self, holder: str, now: float) -> Entry | None:
        """The place ``holder`` holds (:meth:`Entry.held_by`), the latest if several."""
        return next((e for e in reversed(self.entries) if e.held_by(holder, now)), None)

    def taking(self, call: Call, limits: Limits, now: float) -> tuple[Shard, Place]:
        """This shard with the call's new place taken (the others' waiting places given
        again, fairly: :func:`~ackloop.domain.quota.in_line`), and the place."""
        scale = self.scale.now(now)
        entries = in_line(self.entries, Entry(call.holder, now, call.tokens, False, call.key,
                                              call.priority, now),
                          now, scale.applied(limits), not_before=self.paused_until)
        taken = replace(self, entries=tuple(entries), scale=scale)
        mine = max((e for e in entries if e.holder == call.holder), key=lambda e: e.at)
        return taken, Place(mine.at, position(taken.entries, call.holder, now), True)


async def read(store: AgentStore, shard_id: str, now: float) -> Shard:
    return Shard.of(await store.quotas.read(shard_id), now)


async def reserve(store: AgentStore, shard_id: str, call: Call, limits: Limits,
                  clock: Clock) -> Place:
    """The place the call's holder holds, else the one it is given in line
    (:meth:`Shard.taking`), taken; each reading judged at ``clock``'s time then."""

    def take(data: JsonDict | None) -> tuple[JsonDict | None, Place]:
        now = clock.now()
        shard = Shard.of(data, now)
        if (held := shard.held(call.holder, now)) is not None:
            return None, Place(held.at, position(shard.entries, call.holder, now), False)
        taken, place = shard.taking(call, limits, now)
        return taken.doc(), place

    return await store.quotas.change(shard_id, take)


async def correct(store: AgentStore, shard_id: str, holder: str, at: float, tokens: int,
                  clock: Clock) -> None:
    """Put the input tokens the answer counted on ``holder``'s entry at ``at``."""
    await _edit(store, shard_id, holder, at, clock, lambda e: replace(e, tokens=tokens))


async def give_back(store: AgentStore, shard_id: str, holder: str, at: float,
                    clock: Clock) -> None:
    """Take ``holder``'s entry at ``at`` out of the log: its call was not made."""
    await _edit(store, shard_id, holder, at, clock, lambda e: None)


async def _edit(store: AgentStore, shard_id: str, holder: str, at: float, clock: Clock,
                edit: Callable[[Entry], Entry | None]) -> None:
    """Replace ``holder``'s entry at ``at`` with what ``edit`` makes of it (None: remove it);
    nothing is written when there is no such entry or nothing changes."""

    def edited(data: JsonDict | None) -> tuple[JsonDict | None, None]:
        shard = Shard.of(data, clock.now())
        entries = tuple(kept for e in shard.entries
                        if (kept := edit(e) if e.holder == holder and e.at == at else e)
                        is not None)
        return (replace(shard, entries=entries).doc() if entries != shard.entries
                else None), None

    await store.quotas.change(shard_id, edited)


async def refused(store: AgentStore, shard_id: str, call: Call, limits: Limits,
                  retry_after: float | None, adaptive: bool, clock: Clock) -> Place:
    """A call of ``holder`` was answered 429 (``retry_after``: the delay the server gave, if
    any): every call of the shard waits out a pause (:func:`~ackloop.domain.quota.pause`); an
    adaptive quota also lowers its share, to what the server's delay shows it holds when it
    gave one; and ``holder`` takes a new place after the pause, which it returns. The refused
    call's entry stays (on the safe side: the server counts it or not)."""

    def paused(data: JsonDict | None) -> tuple[JsonDict | None, Place]:
        now = clock.now()
        shard = Shard.of(data, now)
        until, length = pause(retry_after, shard.paused_until, shard.paused_for, now)
        if (held := shard.held(call.holder, now)) is not None and held.at >= until:
            return None, Place(held.at, position(shard.entries, call.holder, now), False)
        fits = (fitting_share(shard.entries, call.holder, now, until, limits)
                if retry_after is not None and until > now + 1.0 else None)
        probe = 0.0 < shard.paused_until <= now  # a call made after the last pause
        scale = shard.scale.lowered(now, fits, probe) if adaptive else shard.scale.now(now)
        stopped = replace(shard, paused_until=until, paused_for=length, scale=scale)
        taken, place = stopped.taking(call, limits, now)
        return taken.doc(), place

    return await store.quotas.change(shard_id, paused)
