"""The pure functions of a schedule, by table: the next firing (cron in its time zone across
daylight-saving changes, intervals anchored at start_at, the bounds), the firings of a range,
the jitter, the request ids, and the refusals of an invalid spec."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from ackloop.domain.schedules import (
    Schedule,
    firings_between,
    jitter_of,
    next_fire_after,
    next_firings,
    request_id_of,
)
from ackloop.domain.wire import ID_PATTERN

NY = ZoneInfo("America/New_York")
PARIS = ZoneInfo("Europe/Paris")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # summer time is 30 minutes ahead
CHATHAM = ZoneInfo("Pacific/Chatham")  # at +12:45, summer time 60 minutes ahead


def at(zone: Any, *parts: int) -> float:
    return dt.datetime(*parts, tzinfo=zone).timestamp()


def spec(**fields: Any) -> Schedule:
    return Schedule.model_validate({"id": "s", "agent": "default", "text": "go"} | fields)


@pytest.mark.parametrize(("fields", "after", "expected"), [
    # cron read in UTC by default
    ({"cron": "0 9 * * *"}, at(dt.UTC, 2025, 1, 1, 8, 0), at(dt.UTC, 2025, 1, 1, 9, 0)),
    # strictly after: a time that is itself a firing gives the next one
    ({"cron": "0 9 * * *"}, at(dt.UTC, 2025, 1, 1, 9, 0), at(dt.UTC, 2025, 1, 2, 9, 0)),
    # in its time zone: 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer
    ({"cron": "0 9 * * *", "time_zone": "Europe/Paris"}, at(dt.UTC, 2025, 1, 1, 0, 0),
     at(dt.UTC, 2025, 1, 1, 8, 0)),
    ({"cron": "0 9 * * *", "time_zone": "Europe/Paris"}, at(dt.UTC, 2025, 7, 1, 0, 0),
     at(dt.UTC, 2025, 7, 1, 7, 0)),
    # weekdays only: Friday 2025-01-03 10:00 -> Monday 09:00
    ({"cron": "0 9 * * 1-5"}, at(dt.UTC, 2025, 1, 3, 10, 0), at(dt.UTC, 2025, 1, 6, 9, 0)),
    # DST forward (New York, 2025-03-09 02:00 -> 03:00): the skipped 02:30 fires at 03:00
    ({"cron": "30 2 * * *", "time_zone": "America/New_York"}, at(NY, 2025, 3, 8, 12, 0),
     at(NY, 2025, 3, 9, 3, 0)),
    # ... and the day after at 02:30 again
    ({"cron": "30 2 * * *", "time_zone": "America/New_York"}, at(NY, 2025, 3, 9, 3, 0),
     at(NY, 2025, 3, 10, 2, 30)),
    # across the change, 09:00 stays 09:00 local (13:00 UTC after, 14:00 UTC before)
    ({"cron": "0 9 * * *", "time_zone": "America/New_York"}, at(NY, 2025, 3, 8, 12, 0),
     at(dt.UTC, 2025, 3, 9, 13, 0)),
    # DST back (2025-11-02 02:00 -> 01:00): a daily 01:30 fires once, at its first occurrence
    ({"cron": "30 1 * * *", "time_zone": "America/New_York"}, at(NY, 2025, 11, 1, 12, 0),
     at(dt.UTC, 2025, 11, 2, 5, 30)),
    ({"cron": "30 1 * * *", "time_zone": "America/New_York"}, at(dt.UTC, 2025, 11, 2, 5, 30),
     at(dt.UTC, 2025, 11, 3, 6, 30)),
    # ... while an hourly schedule fires in both 01:00 hours (every real hour)
    ({"cron": "0 * * * *", "time_zone": "America/New_York"}, at(dt.UTC, 2025, 11, 2, 5, 0),
     at(dt.UTC, 2025, 11, 2, 6, 0)),
    # DST forward by 30 minutes (Lord Howe, 2025-10-05 02:00 -> 02:30): the skipped 02:15
    # fires at 02:30, the first instant after it; the day after at 02:15 again
    ({"cron": "15 2 * * *", "time_zone": "Australia/Lord_Howe"},
     at(LORD_HOWE, 2025, 10, 4, 12, 0), at(LORD_HOWE, 2025, 10, 5, 2, 30)),
    ({"cron": "15 2 * * *", "time_zone": "Australia/Lord_Howe"},
     at(LORD_HOWE, 2025, 10, 5, 2, 30), at(LORD_HOWE, 2025, 10, 6, 2, 15)),
    # ... a time outside the skipped half hour is kept
    ({"cron": "45 2 * * *", "time_zone": "Australia/Lord_Howe"},
     at(LORD_HOWE, 2025, 10, 4, 12, 0), at(LORD_HOWE, 2025, 10, 5, 2, 45)),
    # ... as does an hourly 02:15 (then 03:15), and 02:00, the instant of the change itself
    ({"cron": "15 * * * *", "time_zone": "Australia/Lord_Howe"},
     at(LORD_HOWE, 2025, 10, 5, 1, 50), at(LORD_HOWE, 2025, 10, 5, 2, 30)),
    ({"cron": "15 * * * *", "time_zone": "Australia/Lord_Howe"},
     at(LORD_HOWE, 2025, 10, 5, 2, 30), at(LORD_HOWE, 2025, 10, 5, 3, 15)),
    ({"cron": "0 * * * *", "time_zone": "Australia/Lord_Howe"},
     at(LORD_HOWE, 2025, 10, 5, 1, 50), at(LORD_HOWE, 2025, 10, 5, 2, 30)),
    # DST back by 30 minutes (2025-04-06 02:00 -> 01:30): a daily 01:45 fires once
    ({"cron": "45 1 * * *", "time_zone": "Australia/Lord_Howe"},
     at(LORD_HOWE, 2025, 4, 5, 12, 0), at(dt.UTC, 2025, 4, 5, 14, 45)),
    ({"cron": "45 1 * * *", "time_zone": "Australia/Lord_Howe"},
     at(dt.UTC, 2025, 4, 5, 14, 45), at(LORD_HOWE, 2025, 4, 7, 1, 45)),
    # DST forward at 02:45 (Chatham, 2025-09-28 02:45 -> 03:45): 03:00 and 03:30 are
    # skipped and fire at 03:45; 02:30 is before the change
    ({"cron": "0 3 * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 27, 12, 0),
     at(CHATHAM, 2025, 9, 28, 3, 45)),
    ({"cron": "30 3 * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 27, 12, 0),
     at(CHATHAM, 2025, 9, 28, 3, 45)),
    ({"cron": "30 2 * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 27, 12, 0),
     at(CHATHAM, 2025, 9, 28, 2, 30)),
    ({"cron": "0 3 * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 28, 3, 45),
     at(CHATHAM, 2025, 9, 29, 3, 0)),
    # hourly and half-hourly there: the skipped 02:50, 03:00 (and 03:30) fire once at 03:45,
    # then each on its time again
    ({"cron": "50 * * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 28, 2, 40),
     at(CHATHAM, 2025, 9, 28, 3, 45)),
    ({"cron": "50 * * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 28, 3, 45),
     at(CHATHAM, 2025, 9, 28, 3, 50)),
    ({"cron": "0 * * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 28, 2, 40),
     at(CHATHAM, 2025, 9, 28, 3, 45)),
    ({"cron": "*/30 * * * *", "time_zone": "Pacific/Chatham"}, at(CHATHAM, 2025, 9, 28, 3, 45),
     at(CHATHAM, 2025, 9, 28, 4, 0)),
    # intervals anchored at the epoch, or at start_at
    ({"every_seconds": 3600}, 7200.0, 10_800.0),
    ({"every_seconds": 3600}, 7199.5, 7200.0),
    ({"every_seconds": 600, "start_at": 1000}, 0.0, 1000.0),
    ({"every_seconds": 600, "start_at": 1000}, 1000.0, 1600.0),
    ({"every_seconds": 600, "start_at": 1000}, 1599.0, 1600.0),
    # start_at as an aware datetime; a cron schedule does not fire before it
    ({"cron": "0 9 * * *", "start_at": dt.datetime(2025, 2, 1, tzinfo=dt.UTC)},
     at(dt.UTC, 2025, 1, 1), at(dt.UTC, 2025, 2, 1, 9, 0)),
    # end_at: nothing after it
    ({"every_seconds": 600, "start_at": 1000, "end_at": 2000}, 1600.0, None),
    ({"every_seconds": 600, "start_at": 1000, "end_at": 2200}, 1600.0, 2200.0),
])
def test_the_next_firing(fields: dict[str, Any], after: float, expected: float | None) -> None:
    assert next_fire_after(spec(**fields), after) == expected


@pytest.mark.parametrize(("fields", "start", "end", "cap", "expected"), [
    ({"every_seconds": 60}, 0.0, 180.0, 1000, [0.0, 60.0, 120.0, 180.0]),  # both ends in
    ({"every_seconds": 60}, 1.0, 179.0, 1000, [60.0, 120.0]),
    ({"every_seconds": 60}, 0.0, 6000.0, 3, [0.0, 60.0, 120.0]),  # capped
    ({"every_seconds": 60, "end_at": 100}, 0.0, 6000.0, 1000, [0.0, 60.0]),
    ({"cron": "0 12 * * *", "time_zone": "Europe/Paris"}, at(PARIS, 2025, 3, 29),
     at(PARIS, 2025, 3, 31, 23), 1000,
     [at(PARIS, 2025, 3, 29, 12), at(PARIS, 2025, 3, 30, 12), at(PARIS, 2025, 3, 31, 12)]),
])
def test_the_firings_in_a_range(fields: dict[str, Any], start: float, end: float, cap: int,
                                expected: list[float]) -> None:
    assert firings_between(spec(**fields), start, end, cap) == expected


def test_the_next_firings_of_a_schedule_that_ends() -> None:
    assert next_firings(spec(every_seconds=10, end_at=35), 0.0, 5) == [10.0, 20.0, 30.0]


@pytest.mark.parametrize(("schedule_id", "jitter", "time"), [
    ("a", 0, 1000.0), ("a", 30, 1000.0), ("a", 30, 1060.0), ("b", 30, 1000.0),
    ("nightly", 3600, 1_700_000_000.0),
])
def test_the_jitter_is_a_hash_within_its_bound(schedule_id: str, jitter: int,
                                               time: float) -> None:
    schedule = spec(id=schedule_id, every_seconds=60, jitter_seconds=jitter)
    first = jitter_of(schedule, time)
    assert 0 <= first <= jitter
    assert all(jitter_of(spec(id=schedule_id, every_seconds=60, jitter_seconds=jitter), time)
               == first for _ in range(3))  # computed again: the same


def test_the_jitter_spreads_firings() -> None:
    schedule = spec(every_seconds=60, jitter_seconds=600)
    assert len({jitter_of(schedule, 60.0 * i) for i in range(50)}) > 20


@pytest.mark.parametrize(("schedule_id", "time", "kind", "expected"), [
    ("nightly", at(dt.UTC, 2025, 1, 2, 3, 4, 5), "normal", "schedule-nightly-20250102T030405Z"),
    # a backfill of a firing time is that firing: the same request id, so it runs once
    ("nightly", at(dt.UTC, 2025, 1, 2, 3, 4, 5), "backfill",
     "schedule-nightly-20250102T030405Z"),
    # a manual trigger has its own, to the millisecond
    ("nightly", at(dt.UTC, 2025, 1, 2, 3, 4, 5) + 0.25, "manual",
     "schedule-nightly-manual-20250102T030405250Z"),
    ("a_b-C9", 0.0, "normal", "schedule-a_b-C9-19700101T000000Z"),
])
def test_request_ids(schedule_id: str, time: float, kind: Any, expected: str) -> None:
    request_id = request_id_of(schedule_id, time, kind)
    assert request_id == expected
    assert re.match(ID_PATTERN, request_id)
    assert re.match(ID_PATTERN, request_id_of("x" * 64, time, kind))  # the longest id fits


@pytest.mark.parametrize(("fields", "message"), [
    ({"cron": "0 9 * *"}, "has 4 fields; give five"),
    ({"cron": "0 9 * * * *"}, "has 6 fields; give five"),
    ({"cron": "61 9 * * *"}, "is not a valid cron expression"),
    ({"cron": "0 9 * * *", "time_zone": "Mars/Olympus"}, "is not an IANA time zone"),
    ({}, "exactly one of cron"),
    ({"cron": "0 9 * * *", "every_seconds": 60}, "exactly one of cron"),
    ({"every_seconds": 60, "start_at": 100, "end_at": 50}, "end_at is before start_at"),
    ({"every_seconds": 60, "start_at": dt.datetime(2025, 1, 1)}, "aware datetime"),
    ({"every_seconds": 60, "id": "no spaces"}, "id"),
    ({"every_seconds": 60, "overlap": "queue"}, "overlap"),
    # a wake always arrives some late: a window below a minute would miss on-time firings
    ({"every_seconds": 60, "catchup_window_seconds": 0}, "catchup_window_seconds 0 is below 60"),
    ({"every_seconds": 60, "catchup_window_seconds": 59.9}, "is below 60"),
])
def test_an_invalid_spec_is_a_value_error_naming_what_to_fix(fields: dict[str, Any],
                                                             message: str) -> None:
    with pytest.raises(ValueError, match=message):
        spec(**fields)


def test_a_catchup_window_of_a_minute_or_more_is_taken() -> None:
    assert spec(every_seconds=60, catchup_window_seconds=60).catchup_window_seconds == 60


def test_the_digest_follows_the_spec() -> None:
    assert spec(every_seconds=60).digest() == spec(every_seconds=60).digest()
    assert spec(every_seconds=60).digest() != spec(every_seconds=61).digest()
