"""The evals room on both adapters (memory and the Firestore emulator): a report's head and its
pages of cases, replaced under the same eval id, kept apart by owner, listed the latest first,
and every document within Firestore's 1 MiB whatever the report holds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ackloop.docdb.base import MAX_DOCUMENT_BYTES, StorageUnavailable, Write
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.document_sizes import MAX_DEPTH, document_size, value_size
from ackloop.domain.eval_reports import CaseResult, CheckResult, EvalReport, summarize
from ackloop.store import EXPIRE_AT, AgentStore, Retention
from ackloop.store.evals import (
    ANSWER_BYTES,
    CASE_BYTES,
    MAX_CALLS,
    MAX_CHECKS,
    PAGE_BYTES,
    clip,
    storable_case,
)

OWNER = "anonymous"
DIFF = ("trajectory differs:\n  = lookup(city='Paris')\n  - forecast(city='Paris')\n"
        "  + forecast(city='Lyon')\n  ! book(seat=2) -> book(seat=3)")


def case(name: str, *, passed: bool = True, repetition: int = 1, **fields: Any) -> CaseResult:
    checks = [CheckResult(name="answer_mentions_rain", kind="assertion", value=True),
              CheckResult(name="helpfulness", kind="score", value=0.75, reason="mostly"),
              CheckResult(name="tone", kind="label", value="friendly")]
    if not passed:
        checks.append(CheckResult(name="trajectory", kind="assertion", value=False,
                                  reason=DIFF))
    values: dict[str, Any] = {
        "name": name, "repetition": repetition, "run_id": f"run-{name}-{repetition}",
        "agent": "default", "question": f"what about {name}?", "status": "completed",
        "answer": f"answer to {name}", "passed": passed, "score": 1.0 if passed else 0.5,
        "checks": checks, "trajectory": ["lookup(city='Paris')", "forecast(city='Lyon')"],
        "cost_usd": 0.00042, "model_calls": 2, "tool_calls": 2, "wall_seconds": 1.5}
    return CaseResult.model_validate(values | fields)


def report(eval_id: str, cases: list[CaseResult], *, started_at: float = 1_700_000_000.0,
           name: str = "weather") -> EvalReport:
    return EvalReport(eval_id=eval_id, name=name, dataset="evals/weather.yaml",
                      target="local stack", repeat=1, concurrency=4, started_at=started_at,
                      finished_at=started_at + 12.5,
                      summary=summarize(cases, eval_cost_usd=0.001, judge_calls=1,
                                        wall_seconds=12.5), cases=cases)


async def test_a_report_round_trips_whole(store: AgentStore) -> None:
    cases = [case("paris"), case("lyon", passed=False),
             case("json", answer={"city": "Paris", "days": [1, 2, {"rain": None}]}),
             case("nothing", answer=None, status="failed", error="run failed: boom"),
             case("replayed", replay=True, run_id=None, cost_usd=0.0)]
    sent = report("ev-round-trip", cases)
    head = await store.evals.put_report(sent, OWNER, now=1_700_000_100.0)
    assert head.eval_id == "ev-round-trip" and head.summary == sent.summary
    assert head.stored_at == 1_700_000_100.0
    assert await store.evals.get_report("ev-round-trip", OWNER) == sent
    listed = await store.evals.list_reports(OWNER)
    assert [h.eval_id for h in listed if h.eval_id == "ev-round-trip"] == ["ev-round-trip"]
    assert await store.evals.get_report("ev-none", OWNER) is None


async def test_the_same_eval_id_written_again_replaces_the_report(store: AgentStore) -> None:
    many = [case(f"case-{i}", answer="x" * 20_000) for i in range(60)]  # several pages
    await store.evals.put_report(report("ev-again", many), OWNER)
    path = store.eval_path("ev-again", OWNER)
    (head,) = await store.db.get_all([path])
    assert head is not None and head.data["pages"] >= 3

    fewer = report("ev-again", [case("only", passed=False)], name="weather, again")
    await store.evals.put_report(fewer, OWNER)
    assert await store.evals.get_report("ev-again", OWNER) == fewer
    assert [h.name for h in await store.evals.list_reports(OWNER)].count("weather, again") == 1
    # The pages the first report had beyond the second's are emptied, not left full.
    left = await store.db.get_all([store.eval_page_path("ev-again", OWNER, i)
                                   for i in range(1, head.data["pages"])])
    assert all(page is not None and page.data["cases"] == [] for page in left)


async def test_reports_are_their_owners_and_listed_the_latest_first(
    store: AgentStore, prefix: str,
) -> None:
    alice, bob = f"google:alice-{prefix}", f"google:bob-{prefix}"
    for i, eval_id in enumerate(["ev-1", "ev-2", "ev-3"]):
        await store.evals.put_report(report(eval_id, [case("a")], started_at=100.0 + i), alice)
    theirs = report("ev-2", [case("b", passed=False)], started_at=500.0, name="bob's")
    await store.evals.put_report(theirs, bob)

    assert [h.eval_id for h in await store.evals.list_reports(alice)] == ["ev-3", "ev-2", "ev-1"]
    assert [h.eval_id for h in await store.evals.list_reports(alice, limit=2)] == ["ev-3", "ev-2"]
    assert [h.eval_id for h in await store.evals.list_reports(alice, before=102.0)] == [
        "ev-2", "ev-1"]
    assert [h.name for h in await store.evals.list_reports(bob)] == ["bob's"]
    # The same eval id from two owners: two reports, each its owner's alone.
    mine = await store.evals.get_report("ev-2", alice)
    assert mine is not None and mine.name == "weather"
    assert await store.evals.get_report("ev-2", bob) == theirs
    assert await store.evals.get_report("ev-1", bob) is None
    assert await store.evals.list_reports(f"google:carol-{prefix}") == []


async def test_long_texts_are_cut_and_every_document_stays_under_1_mib(
    store: AgentStore,
) -> None:
    huge = "é" * 3_000_000  # 6 MB of UTF-8: six times a document
    diff = f"  - {huge}"
    monster = case(
        "monster", passed=False, answer=huge, question=huge, error=huge,
        checks=[CheckResult(name=f"check-{i}", kind="assertion", value=False, reason=diff)
                for i in range(3 * MAX_CHECKS)],
        trajectory=[f"call_{i}({huge[:5000]})" for i in range(3 * MAX_CALLS)])
    sent = report("ev-huge", [monster, case("small"), monster])
    await store.evals.put_report(sent, OWNER)
    got = await store.evals.get_report("ev-huge", OWNER)
    assert got is not None and [c.name for c in got.cases] == ["monster", "small", "monster"]
    cut = got.cases[0]
    assert isinstance(cut.answer, str) and cut.answer.startswith("é" * 1000)
    assert cut.answer.endswith(f" … [cut: {len(huge.encode())} bytes in all]")
    assert len(cut.answer.encode()) <= ANSWER_BYTES
    assert len(cut.checks) == MAX_CHECKS + 1
    assert cut.checks[-1].value == f"{2 * MAX_CHECKS} more checks not stored"
    assert cut.checks[0].reason is not None and cut.checks[0].reason.startswith("  - éé")
    assert len(cut.trajectory) == MAX_CALLS + 1
    assert cut.trajectory[-1] == f"… {2 * MAX_CALLS} more calls not stored"
    assert got.cases[1] == sent.cases[1]  # a case within its bounds is kept whole
    assert got.summary == sent.summary

    path = store.eval_path("ev-huge", OWNER)
    (head,) = await store.db.get_all([path])
    assert head is not None
    pages = await store.db.get_all([store.eval_page_path("ev-huge", OWNER, i)
                                    for i in range(head.data["pages"])])
    for page in pages:
        assert page is not None
        assert document_size(page.path, page.data) <= PAGE_BYTES + 1024 < MAX_DOCUMENT_BYTES


async def test_a_report_of_1000_cases_round_trips(store: AgentStore) -> None:
    cases = [case(f"case-{i:04d}", passed=i % 7 != 0, repetition=1 + i % 3,
                  answer={"text": f"answer {i} " + "w" * 1500, "n": i})
             for i in range(1000)]
    sent = report("ev-thousand", cases)
    await store.evals.put_report(sent, OWNER)
    got = await store.evals.get_report("ev-thousand", OWNER)
    assert got == sent
    (head,) = await store.db.get_all([store.eval_path("ev-thousand", OWNER)])
    assert head is not None and head.data["case_count"] == 1000 and head.data["pages"] > 1


async def test_text_firestore_cannot_store_is_made_storable(store: AgentStore) -> None:
    deep: Any = "bottom"
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    odd = case("odd\ud800", answer=deep, question="lone \udfff surrogate",
               trajectory=["call(\ud800)"],
               checks=[CheckResult(name="c", kind="assertion", value=False, reason="\ud800")])
    await store.evals.put_report(report("ev-odd", [odd, case("nested", answer=[[1, [2]]])]),
                                 OWNER)
    got = await store.evals.get_report("ev-odd", OWNER)
    assert got is not None
    stored = got.cases[0]
    assert stored.name == "odd?" and stored.question == "lone ? surrogate"
    assert stored.trajectory == ["call(?)"] and stored.checks[0].reason == "?"
    # Nested deeper than Firestore allows: kept as its JSON text.
    assert stored.answer == json.dumps(deep)
    assert got.cases[1].answer == [[1, [2]]]  # an array in an array, as JSON: kept as it was


async def test_retention_dates_the_head_and_its_pages() -> None:
    retention = Retention(86_400.0, 3600.0)
    store = AgentStore(MemoryDocumentDB(), "r_", retention)
    await store.evals.put_report(report("ev-kept", [case("a")]), OWNER, now=1_000.0)
    head, page = await store.db.get_all([store.eval_path("ev-kept", OWNER),
                                         store.eval_page_path("ev-kept", OWNER, 0)])
    assert head is not None and page is not None
    assert head.data[EXPIRE_AT] == page.data[EXPIRE_AT] == retention.after(1_000.0)


async def test_a_page_of_another_generation_is_never_read_as_the_reports() -> None:
    store = AgentStore(MemoryDocumentDB())
    await store.evals.put_report(report("ev-mixed", [case("a")]), OWNER)
    # A writer in the middle of a replace: its page is there, its head not yet.
    await store.db.commit([Write("set", store.eval_page_path("ev-mixed", OWNER, 0),
                                 {"generation": "another", "cases": []})])
    with pytest.raises(StorageUnavailable):
        await store.evals.get_report("ev-mixed", OWNER)


def test_a_case_at_every_bound_still_fits_its_budget() -> None:
    big = "\U0001f600" * 200_000  # four bytes a character
    worst = CaseResult(
        name=big, agent=big, run_id=big, link=big, status=big, question=big, error=big,
        answer={"x": [big]},
        checks=[CheckResult(name=big, kind="assertion", value=big, reason=big)
                for _ in range(10 * MAX_CHECKS)],
        trajectory=[big] * (10 * MAX_CALLS))
    stored = storable_case(worst)
    assert "too large to store" not in str(stored.get("error"))  # cut, not dropped
    assert value_size(stored) <= CASE_BYTES < PAGE_BYTES


def test_clip_cuts_on_a_character_and_says_how_much_there_was() -> None:
    assert clip("short", 10) == "short"
    cut = clip("ab" + "é" * 100, 60)
    assert len(cut.encode()) <= 60 and cut.endswith(" … [cut: 202 bytes in all]")
    assert cut.startswith("abé")
