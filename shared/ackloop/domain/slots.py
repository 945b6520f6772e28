"""A concurrency limit's arithmetic: who holds one of its N slots, who waits in line for one,
and what taking or giving one back does. Pure: the engine (:mod:`ackloop.engine.concurrency`)
keeps the state in a document and acts on the answers.

A holder keeps its slot for a lease (:data:`HOLD_SECONDS`), renewed while it works: a holder
that crashed frees its slot when its lease ends, and not before: another delivery of the same
step waits for it, as the crashed call may still be running.
A step that finds no free slot joins the line (served fairly: :meth:`Slots.served`) and is
acknowledged; the holder that gives a slot back wakes the first in line, and each waiter also
comes back by itself every :data:`RECHECK_SECONDS`. A place in line lapses after
:data:`LINE_SECONDS` without its waiter coming back (it was cancelled, or its messages were
lost), so a waiter gone never holds the line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

HOLD_SECONDS = 45.0
"""A slot's lease: a holder renews it every :data:`RENEW_SECONDS` while it works, so a crashed
holder's slot frees within this."""
RENEW_SECONDS = 15.0
RECHECK_SECONDS = 30.0
"""How often a waiter comes back by itself (its wake), should the holder's wake be lost."""
LINE_SECONDS = 75.0
"""How long a place in line lasts without its waiter coming back."""
REWAKE_SECONDS = 10.0
"""A waiter woken this recently is not woken again by the next slot given back: it is on its
way (two wakes would deliver its step twice at once)."""


@dataclass(frozen=True)
class Holder:
    name: str
    until: float
    by: str = ""
    """The delivery holding it (its process's owner id and its own; empty: a run's slot,
    shared by its steps)."""
    key: str = ""
    """Whose turn it took (a run's tenant, else its owner)."""


@dataclass(frozen=True)
class Waiter:
    name: str
    since: float
    until: float
    wake: str = ""
    """What publishes the waiter's step again (its message, as JSON): what a holder giving its
    slot back sends."""
    woken: float | None = None
    """When a holder giving its slot back last woke it (None: never)."""
    key: str = ""
    """Whose turn it takes in the line's rounds (a run's tenant, else its owner)."""
    priority: int = 0
    """Its run's priority: a higher one is served first."""


@dataclass(frozen=True)
class Slots:
    """One key's slots: the holders and the line."""

    holders: tuple[Holder, ...] = ()
    line: tuple[Waiter, ...] = ()

    def live(self, now: float) -> Slots:
        """Without the holders whose lease ended and the places in line that lapsed."""
        return Slots(tuple(h for h in self.holders if h.until > now),
                     tuple(w for w in self.line if w.until > now))

    def held_by(self, name: str) -> bool:
        return any(h.name == name for h in self.holders)

    def served(self, turns: tuple[Holder, ...] | None = None) -> tuple[Waiter, ...]:
        """The line in the order it is served: the waiters woken for a slot first (on their
        way to it), then by priority (the higher first), then round by
        round across keys (each key's first waiter, then each key's second, ...; a key holding
        slots already is that many rounds on), then in the order they came. So a key with ten
        times the others' steps waiting takes no more of the slots than they do while they
        wait. ``turns``: the holders whose turns count (default: the holders; a holder giving
        its slot back has just had its turn, and counts in whom the slot goes to)."""
        rounds: dict[str, int] = {}
        for h in self.holders if turns is None else turns:
            rounds[h.key] = rounds.get(h.key, -1) + 1
        ranked = []
        for index, w in enumerate(self.line):  # the line as stored: in the order they came
            rounds[w.key] = rounds.get(w.key, -1) + 1
            # A waiter woken for a slot is on its way to it: served first when it comes.
            ranked.append((w.woken is None, -w.priority, rounds[w.key], index, w))
        return tuple(w for *_, w in sorted(ranked, key=lambda r: r[:4]))

    def position(self, name: str) -> int:
        """Places ahead of ``name`` in line, as it is served (the line's length if it is not
        in it)."""
        return next((i for i, w in enumerate(self.served()) if w.name == name), len(self.line))


@dataclass(frozen=True)
class Taken:
    """``take``'s answer: whether ``name`` holds a slot now, else its place in line."""

    held: bool
    ahead: int = 0
    next_free: float | None = None
    """When the first holder's lease ends, if ``name`` waits (the latest it need wait)."""
    wake: list[Waiter] = field(default_factory=list)
    """Waiters served before ``name`` to wake now: a slot is free and they are not on their
    way (``name`` came back to find them ahead of it)."""


def take(slots: Slots, name: str, limit: int, now: float, wake: str = "", by: str = "",
         key: str = "", priority: int = 0) -> tuple[Slots, Taken]:
    """``name`` takes a slot if one is free for it (it holds one already; or fewer than
    ``limit`` are held and no one ahead of it in line is still to take one), else keeps or
    joins its place in line. Its lease (or its place) is renewed either way.

    ``by``: the delivery taking it. A slot ``name`` holds by another delivery (of the same
    step: one that crashed, or a duplicate running still, in this process or another) is that
    delivery's until its lease ends or it gives it back: its call may still be running, and a
    second call under the same slot would break the limit. ``name`` waits for it by its own
    wake, without a place in line (its step is most likely done by then, and a place would
    outlive it). ``key`` and ``priority``: its place in the line's order
    (:meth:`Slots.served`)."""
    slots = slots.live(now)
    mine = next((h for h in slots.holders if h.name == name), None)
    if mine is not None and (mine.by == by or not mine.by or not by):
        return renew(slots, name, now), Taken(True)
    if mine is not None:  # it comes back by its own wake: a place in line would outlive it
        return slots, Taken(False, 0, mine.until)
    free = limit - len(slots.holders)
    ahead = slots.position(name)
    if free > 0 and ahead < free:
        line = tuple(w for w in slots.line if w.name != name)
        return (Slots((*slots.holders, Holder(name, now + HOLD_SECONDS, by, key)), line),
                Taken(True))
    waiter = Waiter(name, now, now + LINE_SECONDS, wake, key=key, priority=priority)
    if ahead < len(slots.line):
        line = tuple(replace(w, until=now + LINE_SECONDS, wake=wake or w.wake)
                     if w.name == name else w for w in slots.line)
    else:
        line = (*slots.line, waiter)
        ahead = Slots(slots.holders, line).position(name)
    next_free = min((h.until for h in slots.holders), default=now)
    kept, woken = _wake_due(Slots(slots.holders, line), free, now)
    return kept, Taken(False, ahead, next_free, woken)


def _wake_due(slots: Slots, free: int, now: float, turns: tuple[Holder, ...] | None = None
              ) -> tuple[Slots, list[Waiter]]:
    """The waiters to wake for ``free`` slots: of the first in line as served (``turns``:
    :meth:`Slots.served`'s), those not woken in the last :data:`REWAKE_SECONDS` (marked woken
    now)."""
    due = {w.name for w in slots.served(turns)[:max(0, free)]
           if w.woken is None or now - w.woken >= REWAKE_SECONDS}
    line = tuple(replace(w, woken=now) if w.name in due else w for w in slots.line)
    return Slots(slots.holders, line), [w for w in line if w.name in due]


def renew(slots: Slots, name: str, now: float) -> Slots:
    """``name``'s lease renewed (a holder at work)."""
    return replace(slots, holders=tuple(replace(h, until=now + HOLD_SECONDS) if h.name == name
                                        else h for h in slots.holders))


def give_back(slots: Slots, name: str, limit: int, now: float) -> tuple[Slots, list[Waiter]]:
    """``name`` gives its slot back: the slots without it, and the waiters to wake: of the
    first in line, as many as slots are free, those not woken in the last
    :data:`REWAKE_SECONDS` (marked woken now)."""
    slots = slots.live(now)
    free = max(0, limit - len(slots.holders) + (1 if slots.held_by(name) else 0))
    return _wake_due(Slots(tuple(h for h in slots.holders if h.name != name), slots.line),
                     free, now, slots.holders)
