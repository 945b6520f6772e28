"""A model quota's arithmetic: when the next call may be made, so that no minute the model's
quota counts holds more requests or input tokens than it allows. Pure: the limiter's shards
(:mod:`ackloop.store.quota`) keep the log it reads, the model step (:mod:`ackloop.engine.quota`)
acts on its answer.

The Gemini API counts requests and input tokens per minute, per project and model; a call over
either is answered 429 ``RESOURCE_EXHAUSTED``. The limiter keeps what the server would count: a
log of the calls made and reserved (:class:`Entry`), each at its slot, with its tokens. A call
reserves the earliest slot, not before now, at which the window ending there, with it, holds no
more than the limits, and no later call's window goes over them (:func:`earliest_slot`): the
calls that wait are served in their order, and a smaller one may go in the room a larger one
ahead of it cannot use. A call whose slot is now runs; a later one waits for it at no cost.

An entry counts for a minute after its slot plus :data:`GRACE_SECONDS`: its holder may make
its call a little after its slot (its wake comes late, its process starts), and the server
counts the call when it arrives. A holder later than that reserves again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

WINDOW_SECONDS = 60.0
"""What Gemini's quotas count over: a minute."""
GRACE_SECONDS = 2.0
"""How late after its slot a holder may still make its call on it."""
RETRY_FLOOR_SECONDS = 1.0
"""The least a 429's retry delay is taken to be: Gemini writes a delay under a second as "0s"
(and Vertex AI gives none), which never means "retry at once"."""


@dataclass(frozen=True)
class Limits:
    """One shard's part of a quota: requests and input tokens per window (None: not limited)."""

    requests: int | None = None
    tokens: int | None = None
    window: float = WINDOW_SECONDS

    def __post_init__(self) -> None:
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"a quota of {self.requests} requests per window admits nothing")
        if self.tokens is not None and self.tokens < 1:
            raise ValueError(f"a quota of {self.tokens} tokens per window admits nothing")


@dataclass(frozen=True)
class Entry:
    """A call made or reserved: who holds it (``run/step``), its slot, its input tokens
    (estimated until its answer says), and whether its holder waits for it (its slot was
    later than when it was taken)."""

    holder: str
    at: float
    tokens: int = 0
    waited: bool = False
    key: str = ""
    """Whose call it is, for fairness: its run's tenant, else its owner."""
    priority: int = 0
    """Its run's priority: a higher one is served first."""
    since: float = 0.0
    """When it was taken: the order of arrival within a key."""

    def held_by(self, holder: str, now: float) -> bool:
        """Whether ``holder`` holds this place at ``now``: its slot is still to come, or it
        waited for it and it came within the grace. A place taken for at once is used at
        once: a second call (a retry, a duplicate) takes a place of its own."""
        return self.holder == holder and (
            self.at > now or (self.waited and self.at + GRACE_SECONDS > now))


def live(entries: Iterable[Entry], now: float, window: float = WINDOW_SECONDS) -> list[Entry]:
    """The entries that still count at ``now`` or later, by slot (those of one slot in the
    order they were taken): those whose slot plus a window and the grace is past are
    dropped."""
    return sorted((e for e in entries if e.at + window + GRACE_SECONDS > now),
                  key=lambda e: e.at)


def earliest_slot(entries: Sequence[Entry], now: float, tokens: int, limits: Limits,
                  not_before: float = 0.0) -> float:
    """The earliest time, at or after now and ``not_before`` (a pause a 429 asked for), at
    which one more call of ``tokens`` input tokens keeps within ``limits`` the window ending
    there and the window ending at each later entry's slot: a call may take a place before
    calls reserved later than it (a small call in the room a large one left), never one that
    would put a later call's minute over the limits. ``entries`` are the live ones
    (:func:`live`)."""
    span = limits.window + GRACE_SECONDS
    ordered = sorted(entries, key=lambda e: e.at)
    start = max(now, not_before)
    candidates = sorted({start, *(e.at + span for e in ordered if e.at + span > start)})
    # The windows ending at the places still to come (none when no call waits): a call
    # placed before one of them counts in its window.
    later = [(e.at, _window(ordered, e.at, span)) for e in ordered if e.at > start]
    for slot in candidates:
        if _fits(_window(ordered, slot, span), tokens, limits) and all(
                _fits(window, tokens, limits) for at, window in later
                if slot < at < slot + span):
            return slot
    return candidates[-1]  # every entry has left: an empty window takes any call


def _window(ordered: Sequence[Entry], end: float, span: float) -> tuple[int, int]:
    """The calls and tokens of the window ending at ``end``: slots in (end - span, end]."""
    inside = [e for e in ordered if end - span < e.at <= end]
    return len(inside), sum(e.tokens for e in inside)


def _fits(window: tuple[int, int], tokens: int, limits: Limits) -> bool:
    """Whether one more call of ``tokens`` fits a window holding ``window``. A call larger
    than the whole window's tokens fits only in an empty window (the server refuses it or
    not; the limiter does not hold it forever)."""
    calls, used = window
    if limits.requests is not None and calls + 1 > limits.requests:
        return False
    return limits.tokens is None or used + tokens <= limits.tokens or calls == 0


def in_line(entries: Sequence[Entry], new: Entry, now: float, limits: Limits,
            not_before: float = 0.0) -> list[Entry]:
    """``entries`` (the live ones) with ``new`` given its place, fairly: the calls whose slot
    has not come are served by priority (the higher first), then round by round across keys
    (each key's first waiting call, then each key's second, ...), then in the order they came;
    each takes the earliest slot that delays none placed before it (:func:`earliest_slot`), never
    earlier than the slot it had (its holder's wake is armed for that). So a key that asks ten
    times as much as the others takes no more of the quota than they do while they ask, and a
    call that came later may take a slot before another key's: that one's holder, woken at its
    old slot, finds its new one and waits again."""
    fixed = [e for e in entries if e.at <= now]
    rounds: dict[str, int] = {}
    ranked = []
    for e in sorted([*(e for e in entries if e.at > now), new], key=lambda e: e.since):
        rounds[e.key] = rounds.get(e.key, -1) + 1
        ranked.append((-e.priority, rounds[e.key], e.since, e))
    placed = list(fixed)
    for *_, e in sorted(ranked, key=lambda r: r[:3]):
        at = earliest_slot(placed, now, e.tokens, limits, not_before)
        if e is not new:  # never earlier than its holder's wake: it would sleep past it
            at = max(at, e.at)
        placed.append(replace(e, at=at, waited=e.waited or at > now))
    return sorted(placed, key=lambda e: e.at)


def position(entries: Sequence[Entry], holder: str, now: float) -> int:
    """How many calls are ahead of ``holder``'s (its latest place) in line: those before it
    (``entries`` in line: by slot, then in the order taken) whose slot has not come (0: it is
    next, or its slot has come)."""
    index = next((i for i in range(len(entries) - 1, -1, -1)
                  if entries[i].holder == holder), None)
    if index is None or entries[index].at <= now:
        return 0
    return sum(1 for e in entries[:index] if e.at > now)


def shard_limits(requests: int | None, tokens: int | None, shards: int, headroom: float
                 ) -> Limits:
    """One shard's part of a quota of ``requests`` and ``tokens`` per minute, ``headroom``
    (a fraction) under it: rounded down, so the shards together never exceed it."""
    def part(total: int | None) -> int | None:
        return None if total is None else max(1, math.floor(total * (1 - headroom) / shards))

    return Limits(requests=part(requests), tokens=part(tokens))


ESTIMATE_BYTES_PER_TOKEN = 3
"""Bytes a token is taken to be where the model has counted too little of the conversation:
on the high side (English text runs near 4), so that the estimate rarely counts less than the
server will."""
LEARNED_MARGIN = 1.1
"""What an estimate scaled to the conversation's own bytes per token (:func:`learned_tokens`)
adds, for new contents denser than what was counted."""
LEARNED_AFTER_TOKENS = 1000
"""How many tokens the model must have counted of a conversation before its bytes per token
are trusted: a question and a function call are mostly JSON, and tell little."""


def estimated_tokens(request_bytes: int) -> int:
    """A request's input tokens, estimated from its JSON bytes before the call
    (:data:`ESTIMATE_BYTES_PER_TOKEN`). The answer's usage corrects it."""
    return max(1, math.ceil(request_bytes / ESTIMATE_BYTES_PER_TOKEN))


def learned_tokens(estimate: int, seen_bytes: int, seen_tokens: int) -> int:
    """``estimate`` (tokens at :data:`ESTIMATE_BYTES_PER_TOKEN`) scaled to the bytes per
    token the model counted for the conversation so far (``seen_tokens`` for its
    ``seen_bytes``), with :data:`LEARNED_MARGIN`: a model, a language or a kind of content
    whose tokens are longer (or shorter) than the default is reserved for as it is counted.
    ``estimate`` as it is until :data:`LEARNED_AFTER_TOKENS` were counted."""
    if seen_tokens < LEARNED_AFTER_TOKENS or seen_bytes <= 0 or estimate <= 0:
        return estimate
    per_token = seen_bytes / seen_tokens
    return max(1, math.ceil(estimate * ESTIMATE_BYTES_PER_TOKEN / per_token * LEARNED_MARGIN))


LOWERED_TO = 0.8
"""An adaptive quota's share after a 429: the pool was busier than the share assumed."""
LOWER_EVERY_SECONDS = 10.0
"""429s closer together than this lower the share once (one burst, one answer)."""
FLOOR_SHARE = 0.05
"""The least share an adaptive quota falls to: it keeps probing."""
CLIMB_EVERY_SECONDS = 15.0
"""How often an adaptive quota's share climbs while no 429 comes."""
CAREFUL_SECONDS = 30.0
"""After a 429, the share climbs slowly (:data:`CAREFUL_STEP`) near where it was refused for
this long, then quickly (:data:`CLIMB_STEP`) again: capacity came back, or more of it."""
CAREFUL_STEP = 0.01
CLIMB_STEP = 0.2


@dataclass(frozen=True)
class Scale:
    """The share of its declared limits an adaptive quota allows now (a fixed quota's is 1):
    lowered by a 429 (to :data:`LOWERED_TO` of itself), climbing while none comes: quickly up
    to nine tenths of where it was last refused, then carefully for :data:`CAREFUL_SECONDS`,
    then quickly again up to the declared limits."""

    share: float = 1.0
    refused_share: float = 1.0
    lowered_at: float = 0.0
    climbed_at: float = 0.0

    @classmethod
    def of(cls, data: object) -> Scale:
        if not isinstance(data, dict):
            return cls()
        return cls(float(data.get("share", 1.0)), float(data.get("refused_share", 1.0)),
                   float(data.get("lowered_at", 0.0)), float(data.get("climbed_at", 0.0)))

    def doc(self) -> dict[str, float]:
        return {"share": self.share, "refused_share": self.refused_share,
                "lowered_at": self.lowered_at, "climbed_at": self.climbed_at}

    def now(self, now: float) -> Scale:
        """The share at ``now``: climbed by each :data:`CLIMB_EVERY_SECONDS` since it last
        changed."""
        if self.share >= 1.0:
            return self
        since = max(self.lowered_at, self.climbed_at)
        steps = int((now - since) // CLIMB_EVERY_SECONDS)
        share = self.share
        near = 0.9 * self.refused_share
        for step in range(1, steps + 1):
            recent = since + step * CLIMB_EVERY_SECONDS - self.lowered_at < CAREFUL_SECONDS
            if recent and share >= near:
                share += CAREFUL_STEP
            elif recent:
                share = min(near, share + CLIMB_STEP)
            else:
                share += CLIMB_STEP
            share = min(1.0, share)
        if steps <= 0:
            return self
        return replace(self, share=share, climbed_at=since + steps * CLIMB_EVERY_SECONDS)

    def lowered(self, now: float, fits: float | None = None, probe: bool = False) -> Scale:
        """After a 429 at ``now``: the share lowered, unless a 429 of the same burst just
        lowered it (``probe``: the 429 answered a call made after the pause the last one set,
        so the pool is still busy: it lowers again). ``fits`` (:func:`fitting_share`): the
        share the server's retry delay shows it holds; the share falls to it at once, and
        climbs carefully near it."""
        current = self.now(now)
        if fits is not None and fits < current.share:
            share = max(FLOOR_SHARE, fits)
            return replace(current, share=share, refused_share=share, lowered_at=now,
                           climbed_at=now)
        if now - self.lowered_at < LOWER_EVERY_SECONDS and not probe:
            return current
        return replace(current, share=max(FLOOR_SHARE, current.share * LOWERED_TO),
                       refused_share=current.share, lowered_at=now, climbed_at=now)

    def applied(self, limits: Limits) -> Limits:
        """``limits`` at this share (rounded down, at least one)."""
        if self.share >= 1.0:
            return limits

        def part(total: int | None) -> int | None:
            return None if total is None else max(1, math.floor(total * self.share))

        return Limits(requests=part(limits.requests), tokens=part(limits.tokens),
                      window=limits.window)


def fitting_share(entries: Sequence[Entry], refused: str, now: float, until: float,
                  limits: Limits) -> float | None:
    """The share of ``limits`` a server holds that refused ``refused``'s call at ``now`` and
    said it would take the next one at ``until``: then, its minute holds the calls made that
    it still counts, and room for one more. None when requests are not limited."""
    if limits.requests is None:
        return None
    counted = sum(1 for e in entries if e.holder != refused and e.at <= now
                  and e.at + limits.window > until)
    return (counted + 1) / limits.requests


MAX_PAUSE_SECONDS = 32.0
"""The longest pause a run of 429s without a retry delay doubles to."""


def pause(retry_after: float | None, paused_until: float, paused_for: float, now: float
          ) -> tuple[float, float]:
    """How long a 429 at ``now`` pauses a quota's shard: its pause's end and length. The
    server's retry delay, when it gave one of a second or more; else (Vertex AI gives none,
    Gemini writes a delay under a second as "0s") :data:`RETRY_FLOOR_SECONDS`, doubled (up to
    :data:`MAX_PAUSE_SECONDS`) for each 429 that comes soon after a pause ended: the pool is
    still busy. A 429 during a pause (a call of the same burst) leaves it as it is."""
    if retry_after is not None and retry_after >= RETRY_FLOOR_SECONDS:
        return max(paused_until, now + retry_after), retry_after
    if now < paused_until:
        return paused_until, paused_for
    again = paused_for > 0 and now - paused_until < max(2 * paused_for, LOWER_EVERY_SECONDS)
    length = min(MAX_PAUSE_SECONDS, 2 * paused_for) if again else RETRY_FLOOR_SECONDS
    return now + length, length
