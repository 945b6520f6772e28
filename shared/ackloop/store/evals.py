"""The evals room: the reports ``ackloop eval`` keeps
(:class:`~ackloop.domain.eval_reports.EvalReport`) for the inspector's eval pages, each a head
and its cases in pages of their own.

* ``evals/{id}``: the head, everything but the cases (the summary among it), with its owner,
  when it was stored, how many cases and pages it has and the generation that wrote them. The
  id is the owner's and the eval id's hash (:meth:`StoreBase.eval_path`): the same eval id
  written again by its owner replaces the report; from another caller it is another report.
* ``evals/{id}/cases/{page:05d}``: the cases, in the report's order, as many to a page as fit
  in :data:`PAGE_BYTES`.

Firestore keeps at most 1 MiB a document (:mod:`ackloop.domain.document_sizes` measures as it does):
each text of a case is cut to a bound (:func:`storable_case`: the answer, the question, the
error, each check's reason, each call of its trajectory, and how many checks and calls) so
that a case never takes more than :data:`CASE_BYTES` and a page never more than PAGE_BYTES,
whatever the report holds. A text cut ends in a note of its full size.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import Field

from ackloop.docdb.base import StorageUnavailable, Write
from ackloop.domain.document_sizes import MAX_DEPTH, document_size, value_size
from ackloop.domain.eval_reports import CaseResult, CheckResult, EvalReport
from ackloop.domain.jsondict import JsonDict
from ackloop.store.base import StoreBase

KIB = 1024
PAGE_BYTES = 512 * KIB
"""The most a page of cases holds (as Firestore measures it): half its document limit."""
CASE_BYTES = 480 * KIB
"""The most one case may take once its texts are cut (the bounds below add up to less)."""
FIELD_BYTES = KIB
"""A case's short texts (name, agent, status, run id, link)."""
TEXT_BYTES = {"question": 16 * KIB, "error": 16 * KIB}
ANSWER_BYTES = 64 * KIB
"""The answer (as JSON text when it is not text)."""
HEAD_TEXT_BYTES = 4 * KIB
"""Each text of the head (the eval's name, dataset, target)."""
MAX_CHECKS = 100
"""Checks kept of a case: the failed ones first; a note says how many more there were."""
CHECK_NAME_BYTES = 256
CHECK_VALUE_BYTES = 512
REASON_BYTES = 32 * KIB
REASONS_BYTES = 128 * KIB
"""All of a case's reasons together, the failed checks' first."""
MAX_CALLS = 500
CALL_BYTES = KIB
CALLS_BYTES = 64 * KIB
"""All of a trajectory's calls together."""
COMMIT_BYTES = 3 * 1024 * KIB
"""The most one commit of a report's pages sends (well under Firestore's request limit)."""
READ_ATTEMPTS = 3
"""Reads of a report that is replaced meanwhile before giving up (503: try again)."""
SPENT = "…"
"""What a text becomes once its case's budget for such texts is spent."""


T = TypeVar("T")


class EvalHead(EvalReport):
    """An eval's report without its cases (left out of it, and of its schema): what a list of
    evals shows, with when it was stored."""

    cases: list[CaseResult] = Field(default_factory=list, exclude=True)
    stored_at: float = Field(0.0, description="When the report was stored (Unix seconds).")


def clip(text: str, limit: int) -> str:
    """``text`` as Firestore can store it (a lone surrogate, which UTF-8 cannot carry, becomes
    ``?``) in at most ``limit`` UTF-8 bytes; a text cut ends in a note of its full size."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    note = f" … [cut: {len(data)} bytes in all]"
    return data[:max(0, limit - len(note.encode()))].decode("utf-8", "ignore") + note


def _within(texts: Sequence[str], each: int, total: int) -> list[str]:
    """Each text cut to ``each`` bytes, in order, until ``total`` bytes are spent; the texts
    after that become :data:`SPENT`."""
    kept: list[str] = []
    for text in texts:
        cut = clip(text, min(each, total)) if total >= 64 else SPENT
        total -= len(cut.encode())
        kept.append(cut)
    return kept


def nests_deeper(value: Any, levels: int) -> bool:
    """Whether maps and arrays nest in ``value`` more than ``levels`` deep (read without
    recursion: whatever the depth)."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level >= levels:
            return True
        stack.extend((child, level + 1) for child in children)
    return False


def _answer(answer: Any) -> JsonDict:
    """The answer as text: itself when it is text, else its JSON, read back as the value
    unless it was cut or nests deeper than Firestore's :data:`MAX_DEPTH` (then as text)."""
    if isinstance(answer, str):
        return {"answer_text": clip(answer, ANSWER_BYTES)}
    as_text = nests_deeper(answer, MAX_DEPTH)
    try:
        text = json.dumps(answer, ensure_ascii=False, default=str)
    except (RecursionError, ValueError):
        text, as_text = "(an answer nested too deeply to be stored)", True
    as_text = as_text or len(text.encode("utf-8", "replace")) > ANSWER_BYTES
    return {"answer_json": clip(text, ANSWER_BYTES), "answer_as_text": as_text}


def _checks(checks: list[CheckResult]) -> list[JsonDict]:
    """At most :data:`MAX_CHECKS` checks (the failed ones first, in their order), their texts
    cut, the failed checks' reasons given the budget first; then a note of those left out."""
    order = sorted(range(len(checks)), key=lambda i: not checks[i].failed)[:MAX_CHECKS]
    reasons = dict(zip(order, _within([checks[i].reason or "" for i in order], REASON_BYTES,
                                      REASONS_BYTES), strict=True))
    kept = []
    for i in sorted(order):
        check = checks[i]
        value = (clip(check.value, CHECK_VALUE_BYTES) if isinstance(check.value, str)
                 else check.value)
        kept.append({"name": clip(check.name, CHECK_NAME_BYTES), "kind": check.kind, "value": value,
                     "reason": reasons[i] if check.reason is not None else None})
    if len(checks) > len(order):
        kept.append({"name": "…", "kind": "label", "reason": None,
                     "value": f"{len(checks) - len(order)} more checks not stored"})
    return kept


def _calls(trajectory: list[str]) -> list[str]:
    calls = _within(trajectory[:MAX_CALLS], CALL_BYTES, CALLS_BYTES)
    if len(trajectory) > MAX_CALLS:
        calls.append(f"… {len(trajectory) - MAX_CALLS} more calls not stored")
    return calls


_STUB_FIELDS = {"name", "repetition", "run_id", "status", "passed", "score", "cost_usd",
                "model_calls", "tool_calls", "wall_seconds", "replay"}


def storable_case(case: CaseResult) -> JsonDict:
    """The case as a page stores it: every text cut to its bound, so that it takes at most
    :data:`CASE_BYTES` (a case with a field this room does not know of that is larger still
    keeps its figures alone, and says so in its error)."""
    data = case.model_dump(mode="json", exclude={"answer", "checks", "trajectory"})
    for name, value in data.items():
        if isinstance(value, str):
            data[name] = clip(value, TEXT_BYTES.get(name, FIELD_BYTES))
    data |= _answer(case.answer)
    data["checks"] = _checks(case.checks)
    data["trajectory"] = _calls(case.trajectory)
    if value_size(data) <= CASE_BYTES:
        return data
    stub = case.model_dump(mode="json", include=_STUB_FIELDS)
    return stub | {"name": clip(case.name, FIELD_BYTES),
                   "status": clip(case.status or "", FIELD_BYTES) or None,
                   "run_id": clip(case.run_id or "", FIELD_BYTES) or None,
                   "error": f"this case's record ({value_size(data)} bytes) was too large "
                            "to store: its figures alone were kept"}


def read_case(data: JsonDict) -> CaseResult:
    """A stored case as it was written (its answer decoded, unless it was cut)."""
    answer: Any = data.get("answer_text")
    if "answer_json" in data:
        text = str(data["answer_json"])
        answer = text if data.get("answer_as_text") else json.loads(text)
    return CaseResult.model_validate(data | {"answer": answer})


def grouped(items: Sequence[T], weigh: Callable[[T], int], limit: int) -> list[list[T]]:
    """``items`` in order, in groups whose weights add up to at most ``limit`` (an item that
    weighs more stands alone in its group)."""
    groups: list[list[T]] = []
    size = 0
    for item in items:
        weight = weigh(item)
        if not groups or size + weight > limit:
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += weight
    return groups


def paged(cases: list[JsonDict]) -> list[list[JsonDict]]:
    """The cases in pages of at most :data:`PAGE_BYTES` (as Firestore measures), in order."""
    return grouped(cases, value_size, PAGE_BYTES)


def batches(writes: list[Write]) -> list[list[Write]]:
    """``writes`` in commits of at most :data:`COMMIT_BYTES`, in order (the last holds the
    head: a report of a few pages is written in one commit, all of it or none)."""
    return grouped(writes, lambda write: document_size(write.path, write.data), COMMIT_BYTES)


class Evals(StoreBase):
    """``evals/{id}`` and ``evals/{id}/cases/{page}``: eval reports, by owner."""

    def _head(self, report: EvalReport, owner: str, now: float, pages: int,
              generation: str) -> JsonDict:
        head = report.model_dump(mode="json", exclude={"cases"})
        for name, value in head.items():
            if isinstance(value, str):
                head[name] = clip(value, HEAD_TEXT_BYTES)
        return head | {"owner": owner, "stored_at": now, "case_count": len(report.cases),
                       "pages": pages, "generation": generation} | self._expiry(now)

    async def put_report(self, report: EvalReport, owner: str, now: float | None = None
                         ) -> EvalHead:
        """Store ``report`` as ``owner``'s, replacing the one stored under its eval id before:
        its pages first, its head last (the pages of another generation are never read as
        its). Pages the report before had beyond this one's are emptied."""
        now = time.time() if now is None else now
        path = self.eval_path(report.eval_id, owner)
        pages = paged([storable_case(case) for case in report.cases])
        (before,) = await self.db.get_all([path])
        left = int(before.data.get("pages") or 0) if before is not None else 0
        generation = uuid.uuid4().hex
        expiry = self._expiry(now)
        emptied: list[list[JsonDict]] = [[] for _ in range(len(pages), left)]
        writes = [Write("set", self.eval_page_path(report.eval_id, owner, i),
                        {"generation": generation, "cases": page} | expiry)
                  for i, page in enumerate(pages + emptied)]
        head = self._head(report, owner, now, len(pages), generation)
        writes.append(Write("set", path, head))
        for batch in batches(writes):
            await self.db.commit(batch)
        return EvalHead.model_validate(head)

    async def get_report(self, eval_id: str, owner: str) -> EvalReport | None:
        """``owner``'s report of ``eval_id``, whole, or None. A report replaced while it is
        read is read again (its head and pages of one generation)."""
        path = self.eval_path(eval_id, owner)
        for _ in range(READ_ATTEMPTS):
            (head,) = await self.db.get_all([path])
            if head is None or head.data.get("owner") != owner:
                return None
            count = int(head.data.get("pages") or 0)
            pages = await self.db.get_all(
                [self.eval_page_path(eval_id, owner, i) for i in range(count)])
            generation = head.data.get("generation")
            if all(p is not None and p.data.get("generation") == generation for p in pages):
                cases = [read_case(case) for page in pages if page is not None
                         for case in page.data.get("cases") or []]
                return EvalReport.model_validate(head.data | {"cases": cases})
        raise StorageUnavailable(f"eval {eval_id} kept changing while it was read")

    async def list_reports(self, owner: str, limit: int = 50, before: float | None = None
                           ) -> list[EvalHead]:
        """``owner``'s reports without their cases, the latest started first (those started
        before ``before`` when given: the next page)."""
        snaps = await self.db.list_newest(self._evals, {"owner": owner}, "started_at", limit,
                                          before)
        return [EvalHead.model_validate(snap.data) for snap in snaps]
