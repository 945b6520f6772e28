"""The limiter's arithmetic (:mod:`ackloop.domain.quota`), table by table."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ackloop.config.quotas import ModelQuota, quota_for
from ackloop.domain.quota import (
    GRACE_SECONDS,
    Entry,
    Limits,
    Scale,
    earliest_slot,
    estimated_tokens,
    fitting_share,
    in_line,
    learned_tokens,
    live,
    pause,
    position,
    shard_limits,
)

W = 60.0 + GRACE_SECONDS
"""How long an entry counts after its slot."""


def at(*times: float, tokens: int = 0) -> list[Entry]:
    return [Entry(f"r{i}", t, tokens) for i, t in enumerate(times)]


@pytest.mark.parametrize(("entries", "now", "tokens", "limits", "not_before", "slot"), [
    ([], 100.0, 0, Limits(requests=2), 0.0, 100.0),  # an empty log: now
    (at(100.0), 100.0, 0, Limits(requests=2), 0.0, 100.0),  # room for one more: now
    (at(100.0, 100.0), 100.0, 0, Limits(requests=2), 0.0, 100.0 + W),  # full: the oldest leaves
    (at(90.0, 100.0), 100.0, 0, Limits(requests=2), 0.0, 90.0 + W),
    # Before a place reserved later, when that place's minute stays within the limits ...
    (at(100.0, 130.0), 110.0, 0, Limits(requests=3), 0.0, 110.0),
    # ... and not when it would go over: then once the first has left.
    (at(100.0, 130.0), 110.0, 0, Limits(requests=2), 0.0, 100.0 + W),
    # A small call in the room a large one waiting for its place cannot use.
    ([*at(100.0, tokens=600), Entry("big", 100.0 + W, 700)], 101.0, 300, Limits(tokens=1000),
     0.0, 101.0),
    ([*at(100.0, tokens=600), Entry("big", 100.0 + W, 700)], 101.0, 500, Limits(tokens=1000),
     0.0, 100.0 + 2 * W),
    (at(100.0), 100.0, 0, Limits(requests=5), 104.0, 104.0),  # a 429's pause
    (at(100.0, tokens=700), 100.0, 400, Limits(tokens=1000), 0.0, 100.0 + W),  # tokens bind
    (at(100.0, tokens=500), 100.0, 400, Limits(tokens=1000), 0.0, 100.0),
    ([], 100.0, 5000, Limits(tokens=1000), 0.0, 100.0),  # too large for a window: alone
    (at(100.0, tokens=10), 100.0, 5000, Limits(tokens=1000), 0.0, 100.0 + W),
    (at(100.0, 101.0, 102.0), 102.0, 0, Limits(requests=2), 0.0, 101.0 + W),
])
def test_the_earliest_slot_keeps_every_window_within_the_limits(
        entries: list[Entry], now: float, tokens: int, limits: Limits, not_before: float,
        slot: float) -> None:
    assert earliest_slot(entries, now, tokens, limits, not_before) == pytest.approx(slot)


@pytest.mark.parametrize("sizes", [[300 + 100 * (i % 7) for i in range(40)],
                                   [2500 if i % 5 == 0 else 150 + 40 * (i % 3)
                                    for i in range(60)]])
def test_slots_taken_one_after_another_never_put_more_in_a_window_than_allowed(
        sizes: list[int]) -> None:
    entries: list[Entry] = []
    limits = Limits(requests=5, tokens=3000)
    for i, tokens in enumerate(sizes):
        now = 7.0 * i  # calls keep coming; small ones may go before large ones reserved
        entries.append(Entry(f"r{i}", earliest_slot(entries, now, tokens, limits), tokens))
    for e in entries:  # every window that ends at a slot (the server counts at each arrival)
        window = [f for f in entries if e.at - 60.0 - GRACE_SECONDS < f.at <= e.at]
        assert len(window) <= 5 and sum(f.tokens for f in window) <= 3000


@pytest.mark.parametrize(("entries", "now", "kept"), [
    (at(10.0, 50.0, 100.0), 100.0, ["r1", "r2"]),  # r0 counted until 72
    (at(10.0), 10.0 + W, []),
    (at(10.0), 10.0 + W - 0.1, ["r0"]),
])
def test_live_entries_are_those_still_counted(entries: list[Entry], now: float,
                                              kept: list[str]) -> None:
    assert [e.holder for e in live(entries, now)] == kept


@pytest.mark.parametrize(("holder", "now", "ahead"), [
    ("r3", 100.0, 2),  # r1 and r2 come before it, r0's slot has come
    ("r1", 100.0, 0),
    ("r0", 100.0, 0),
    ("nobody", 100.0, 0),
])
def test_position_counts_the_calls_ahead(holder: str, now: float, ahead: int) -> None:
    assert position(at(90.0, 110.0, 120.0, 130.0), holder, now) == ahead


@pytest.mark.parametrize(("entry", "holder", "now", "held"), [
    (Entry("a", 110.0), "a", 100.0, True),  # still to come
    (Entry("a", 110.0), "b", 100.0, False),
    (Entry("a", 100.0, waited=True), "a", 101.0, True),  # came within the grace
    (Entry("a", 100.0, waited=True), "a", 100.0 + GRACE_SECONDS, False),  # too late
    (Entry("a", 100.0), "a", 100.0, False),  # taken for at once: used at once
])
def test_a_place_is_held_while_it_is_to_come_or_just_came_after_a_wait(
        entry: Entry, holder: str, now: float, held: bool) -> None:
    assert entry.held_by(holder, now) is held


@pytest.mark.parametrize(("requests", "tokens", "shards", "headroom", "limits"), [
    (60, None, 1, 0.02, Limits(requests=58)),
    (600, 1_000_000, 20, 0.02, Limits(requests=29, tokens=49_000)),
    (10, None, 1, 0.02, Limits(requests=9)),
    (1, None, 4, 0.02, Limits(requests=1)),  # never none
])
def test_a_shards_part_is_its_share_under_the_headroom_rounded_down(
        requests: int | None, tokens: int | None, shards: int, headroom: float,
        limits: Limits) -> None:
    assert shard_limits(requests, tokens, shards, headroom) == limits


@pytest.mark.parametrize(("quota", "shards"), [
    (ModelQuota(model="m", rpm=60), 1),
    (ModelQuota(model="m", rpm=600), 10),  # one write a call: ten a second over ten shards
    (ModelQuota(model="m", rpm=600, tpm=1_000_000), 20),  # a correction too
    (ModelQuota(model="m", tpm=1_000_000), 1),
    (ModelQuota(model="m", rpm=600, shards=3), 3),
])
def test_shards_are_sized_to_a_write_a_second_each(quota: ModelQuota, shards: int) -> None:
    assert quota.shard_count == shards


def test_a_quota_that_limits_nothing_is_refused_and_star_covers_the_rest() -> None:
    with pytest.raises(ValueError, match="limits nothing"):
        ModelQuota(model="m")
    named, rest = ModelQuota(model="a", rpm=5), ModelQuota(model="*", rpm=9)
    assert quota_for([rest, named], "a") is named
    assert quota_for([rest, named], "b") is rest
    assert quota_for([named], "b") is None


@pytest.mark.parametrize(("size", "tokens"), [(0, 1), (3, 1), (4, 2), (3000, 1000)])
def test_tokens_are_estimated_on_the_high_side(size: int, tokens: int) -> None:
    assert estimated_tokens(size) == tokens


@pytest.mark.parametrize(("estimate", "seen_bytes", "seen_tokens", "tokens"), [
    (40_000, 600_000, 100_000, 22_000),   # 6 bytes a token counted: about half, a tenth over
    (40_000, 400_000, 100_000, 33_000),   # English's 4 bytes a token
    (40_000, 200_000, 100_000, 66_000),   # denser than the default: more is reserved
    (40_000, 6_000, 999, 40_000),         # too little counted to tell: the estimate
    (40_000, 0, 5_000, 40_000),           # no bytes seen
    (0, 600_000, 100_000, 0),             # nothing new
    (1, 600_000, 100_000, 1),             # never less than a token
])
def test_new_contents_are_reserved_at_the_bytes_per_token_the_model_counted(
        estimate: int, seen_bytes: int, seen_tokens: int, tokens: int) -> None:
    assert learned_tokens(estimate, seen_bytes, seen_tokens) == tokens


@pytest.mark.parametrize(("scale", "now", "share"), [
    (Scale(), 1000.0, 1.0),  # a fixed quota, or one never refused
    (Scale(0.4, 0.5, 1000.0, 1000.0), 1014.0, 0.4),  # less than a step
    (Scale(0.4, 0.5, 1000.0, 1000.0), 1015.0, 0.45),  # quickly, up to 0.9 of where refused
    (Scale(0.46, 0.5, 1000.0, 1000.0), 1015.0, 0.47),  # there: carefully, for 30 s
    (Scale(0.4, 0.5, 1000.0, 1000.0), 1030.0, 0.65),  # then quickly again
    (Scale(0.4, 0.5, 1000.0, 1000.0), 1045.0, 0.85),
    (Scale(0.4, 0.5, 1000.0, 1000.0), 1060.0, 1.0),  # and no further than the limits
    (Scale(0.4, 0.5, 1000.0, 1000.0), 1135.0, 1.0),
])
def test_an_adaptive_share_climbs_back_while_no_429_comes(scale: Scale, now: float,
                                                          share: float) -> None:
    assert scale.now(now).share == pytest.approx(share)


@pytest.mark.parametrize(("scale", "now", "share", "refused_share"), [
    (Scale(), 1000.0, 0.8, 1.0),
    (Scale(0.5, 1.0, 900.0, 900.0), 1000.0, 0.8, 1.0),  # a long quiet: it had climbed back
    (Scale(0.8, 1.0, 995.0, 995.0), 1000.0, 0.8, 1.0),  # a second 429 of one burst: once
    (Scale(0.05, 0.06, 900.0, 900.0), 901.0, 0.05, 0.06),
])
def test_a_429_lowers_an_adaptive_share_once_a_burst(scale: Scale, now: float, share: float,
                                                     refused_share: float) -> None:
    lowered = scale.lowered(now)
    assert (lowered.share, lowered.refused_share) == pytest.approx((share, refused_share))


def test_a_429_to_a_call_made_after_the_pause_lowers_again() -> None:
    once = Scale().lowered(1000.0)
    # The pool is still busy: a probe made after the pause is refused, 2 s later.
    assert once.lowered(1002.0, probe=True).share == pytest.approx(0.64)
    assert once.lowered(1002.0).share == pytest.approx(0.8)  # a call of the same burst


@pytest.mark.parametrize(("scale", "fits", "share"), [
    (Scale(), 0.35, 0.35),  # the server's delay shows a third: there at once, not 0.8
    (Scale(0.8, 1.0, 995.0, 995.0), 0.35, 0.35),  # even within a burst's ten seconds
    (Scale(0.3, 0.4, 995.0, 995.0), 0.5, 0.3),  # never raised by it
    (Scale(), 0.01, 0.05),  # and never below the floor
])
def test_a_429_with_a_retry_delay_lowers_to_what_the_server_holds(
        scale: Scale, fits: float, share: float) -> None:
    lowered = scale.lowered(1000.0, fits)
    assert lowered.share == pytest.approx(share)
    if share < scale.now(1000.0).share:  # climbs carefully near it
        assert lowered.refused_share == pytest.approx(share)
        assert lowered.now(1015.0).share == pytest.approx(share + 0.01)


def made(*ats: float) -> list[Entry]:
    return [Entry(f"r{i}/0000-model", at) for i, at in enumerate(ats)]


@pytest.mark.parametrize(("entries", "until", "limits", "fits"), [
    # 19 calls still counted 40 s on, when the server takes the next: 20 of 60.
    (made(*[981.0 + i for i in range(19)], *[940.0 + i for i in range(10)]), 1040.0,
     Limits(requests=60), 20 / 60),
    # A call not made yet (its slot to come) and the refused one are not counted.
    (made(990.0, 1005.0), 1010.0, Limits(requests=10), 2 / 10),
    (made(990.0), 1010.0, Limits(tokens=1000), None),  # requests not limited: nothing to say
])
def test_a_retry_delay_tells_how_many_calls_the_servers_minute_holds(
        entries: list[Entry], until: float, limits: Limits, fits: float | None) -> None:
    refused = Entry("refused/0000-model", 1000.0)
    assert fitting_share([*entries, refused], refused.holder, 1000.0, until, limits) == (
        pytest.approx(fits) if fits is not None else None)


@pytest.mark.parametrize(("retry_after", "paused_until", "paused_for", "now", "paused"), [
    (12.0, 0.0, 0.0, 1000.0, (1012.0, 12.0)),  # the server's delay
    (None, 0.0, 0.0, 1000.0, (1001.0, 1.0)),  # none: a second
    (0.0, 0.0, 0.0, 1000.0, (1001.0, 1.0)),  # "0s": a second, never "now"
    (None, 1001.0, 1.0, 1000.5, (1001.0, 1.0)),  # a 429 of the same burst: as it is
    (None, 1001.0, 1.0, 1001.2, (1003.2, 2.0)),  # refused again just after: doubled
    (None, 1001.0, 16.0, 1001.2, (1033.2, 32.0)),  # up to 32 s
    (None, 1001.0, 32.0, 1001.2, (1033.2, 32.0)),
    (None, 1001.0, 2.0, 1100.0, (1101.0, 1.0)),  # long after the pause: a second again
])
def test_a_429_pauses_for_its_delay_or_doubles_while_refusals_follow_each_other(
        retry_after: float | None, paused_until: float, paused_for: float, now: float,
        paused: tuple[float, float]) -> None:
    assert pause(retry_after, paused_until, paused_for, now) == pytest.approx(paused)


def test_a_share_applies_to_both_limits_rounded_down() -> None:
    assert Scale(0.5).applied(Limits(requests=9, tokens=1001)) == Limits(requests=4,
                                                                         tokens=500)
    assert Scale(0.01).applied(Limits(requests=9)) == Limits(requests=1)


def waiting(holder: str, key: str, since: float, priority: int = 0) -> Entry:
    return Entry(holder, 0.0, 0, False, key, priority, since)


@pytest.mark.parametrize(("before", "new", "order"), [
    # One key's burst, then another key's call: it goes in the burst's second round.
    ([waiting("a1", "A", 1), waiting("a2", "A", 2), waiting("a3", "A", 3)],
     waiting("b1", "B", 4), ["a1", "b1", "a2", "a3"]),
    # Two keys alternate, whatever order they came in.
    ([waiting("a1", "A", 1), waiting("a2", "A", 2), waiting("b1", "B", 3)],
     waiting("b2", "B", 4), ["a1", "b1", "a2", "b2"]),
    # A higher priority goes first.
    ([waiting("a1", "A", 1), waiting("a2", "A", 2)], waiting("u", "U", 3, priority=9),
     ["u", "a1", "a2"]),
    # One key alone: first come, first served.
    ([waiting("a1", "A", 1), waiting("a2", "A", 2)], waiting("a3", "A", 3), ["a1", "a2", "a3"]),
])
def test_waiting_calls_are_served_by_priority_then_round_by_round_across_keys(
        before: list[Entry], new: Entry, order: list[str]) -> None:
    limits = Limits(requests=1)  # one call a window: every waiting call a window apart
    now = 10.0
    made = Entry("m", now - 1.0)  # the window is full until it leaves
    placed = in_line([made, *(replace(e, at=now + 1 + i) for i, e in enumerate(before))], new,
                     now, limits)
    later = [e for e in placed if e.at > now]
    assert [e.holder for e in sorted(later, key=lambda e: e.at)] == order
    assert all(e.waited for e in later)
    gaps = [b.at - a.at for a, b in zip([made, *later], later, strict=False)]
    assert all(g == pytest.approx(60.0 + GRACE_SECONDS) for g in gaps)
