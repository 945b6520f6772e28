"""What the run inspector (``/ui``) reads beyond a single run: the caller's runs, a run's
transcript, and, for operators, dead letters and poison and the redrive of a dead letter.

A caller's runs and transcripts are theirs alone, as everywhere in the API (another caller's
run is 404). Dead letters and poison are deployment-wide (any caller's messages), so only the
callers ``ACKLOOP_API_OPERATORS`` names may read or re-drive them; when the app checks no one
(``ACKLOOP_API_AUTH=none``: local, or Cloud Run IAM in front) the anonymous caller is an
operator, since whoever reaches the app was let in by that choice.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, Field

from ackloop.api.auth import OPERATORS_SETTING, caller_of, is_operator
from ackloop.api.errors import ApiError
from ackloop.api.models import ErrorBody, RunSummary
from ackloop.api.runs import ERRORS, RunId, deps_of, existing_run
from ackloop.domain.records import RunStatus
from ackloop.domain.wire import ID_PATTERN
from ackloop.engine.redrive import redrive

router = APIRouter(tags=["inspector"])

PREVIEW_BYTES = 2048
"""How much of a dead or poisoned message's data a listing shows (decoded as text)."""

StatusFilter = Literal["queued", "running", "completed", "failed", "cancelled"]
IdFilter = Annotated[str | None, Query(pattern=ID_PATTERN, max_length=128)]
RecordLimit = Annotated[int, Query(ge=1, le=500, description="At most this many, newest first.")]
OPERATOR_ERRORS: dict[int | str, dict[str, Any]] = {
    **ERRORS, 403: {"model": ErrorBody, "description": "Operators only."}}


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="Newest first.")
    next: str | None = Field(description="Pass as `before` for the next page; null at the end.")


class TranscriptView(BaseModel):
    run_id: str
    conversation_id: str
    contents: list[dict[str, Any]] = Field(
        description="Gemini contents of the run's conversation, oldest first, as the model "
        "received them (user text, model text and function calls, function responses); the "
        "model's opaque thought signatures are left out.")


class DeadLetterView(BaseModel):
    message_id: str
    run_id: str | None
    step: str | None
    origin: str | None = Field(description="queries, model_steps or tool_steps; null: never "
                               "re-driven (not one of the run's messages, or cut short).")
    cause: str
    verdict: str | None
    delivery_attempts: Any = None
    received_at: float | None
    redriven_at: float | None
    redrive_outcome: str | None
    data_preview: str


class DeadLetters(BaseModel):
    dead_letters: list[DeadLetterView] = Field(description="Newest first.")


class PoisonView(BaseModel):
    message_id: str
    kind: str | None
    reason: str | None
    error: str | None
    subscription: str | None
    received_at: float | None
    data_preview: str


class PoisonList(BaseModel):
    poison: list[PoisonView] = Field(description="Newest first.")


class RedriveResult(BaseModel):
    message_id: str
    run_id: str | None
    step: str | None
    outcome: str = Field(description="redriven, run_finished, run_missing, conversation_busy, "
                         "parent_resolved (a child run whose caller has ended or has taken "
                         "its end) or unknown_origin (see `ackloop runs redrive`).")
    cause: str


def require_operator(request: Request) -> None:
    """403, naming the setting that grants it, unless the caller is an operator."""
    if is_operator(request):
        return
    raise ApiError(403, "forbidden", f"dead letters and poison are for operators: add "
                   f"{caller_of(request)!r} to {OPERATORS_SETTING} (comma-separated callers) "
                   "to grant it")


def preview(data: object) -> str:
    """The start of a recorded message's data (base64) as text, for a person to read."""
    try:
        raw = base64.b64decode(str(data or ""), validate=True)
    except ValueError:
        return ""
    return raw[:PREVIEW_BYTES].decode("utf-8", errors="replace")


def _text(record: dict[str, Any], name: str) -> str | None:
    value = record.get(name)
    return None if value is None else str(value)


def _seconds(record: dict[str, Any], name: str) -> float | None:
    value = record.get(name)
    return float(value) if isinstance(value, int | float) else None


def dead_letter_view(record: dict[str, Any]) -> DeadLetterView:
    return DeadLetterView(
        message_id=str(record["message_id"]), run_id=_text(record, "run_id"),
        step=_text(record, "step"), origin=_text(record, "origin"),
        cause=str(record.get("cause") or ""), verdict=_text(record, "verdict"),
        delivery_attempts=record.get("delivery_attempts"),
        received_at=_seconds(record, "received_at"), redriven_at=_seconds(record, "redriven_at"),
        redrive_outcome=_text(record, "redrive_outcome"), data_preview=preview(record.get("data")))


def newest_first(records: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: _seconds(r, "received_at") or 0.0, reverse=True)[:limit]


@router.get("/runs", response_model=RunList, responses=ERRORS, summary="List your runs")
async def list_runs(
    request: Request,
    status: Annotated[StatusFilter | None, Query(description="Only runs in this status.")] = None,
    agent: IdFilter = None,
    conversation_id: IdFilter = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    before: Annotated[float | None, Query(
        gt=0, description="A previous answer's `next`: the page after it.")] = None,
) -> RunList:
    """The caller's runs, newest first, filtered by status, agent and conversation."""
    deps = await deps_of(request)
    runs = await deps.store.recent_runs(
        limit, status=RunStatus(status) if status else None, agent=agent,
        conversation_id=conversation_id, owner=caller_of(request), before=before)
    more = len(runs) == limit
    return RunList(runs=[RunSummary.of(r) for r in runs],
                   next=repr(runs[-1].created_at) if more else None)


@router.get("/runs/{run_id}/transcript", response_model=TranscriptView, responses=ERRORS,
            summary="A run's conversation as the model saw it")
async def get_transcript(request: Request, run_id: RunId) -> TranscriptView:
    """The transcript of the run's conversation: the runs before it, this run, and any run of
    the conversation after it."""
    deps = await deps_of(request)
    run = await existing_run(deps, run_id, caller_of(request))
    transcript = await deps.store.load_transcript(run.conversation_id)
    return TranscriptView(run_id=run_id, conversation_id=run.conversation_id,
                          contents=[_readable(c) for c in transcript.contents])


def _readable(content: dict[str, Any]) -> dict[str, Any]:
    parts = [{k: v for k, v in part.items() if k not in ("thought_signature", "thoughtSignature")}
             for part in content.get("parts") or [] if isinstance(part, dict)]
    return {"role": content.get("role"), "parts": parts}


operators_only = [Depends(require_operator)]


@router.get("/dead-letters", response_model=DeadLetters, responses=OPERATOR_ERRORS,
            dependencies=operators_only, summary="Dead letters (operators)")
async def list_dead_letters(request: Request, limit: RecordLimit = 100) -> DeadLetters:
    """Every dead letter, re-driven or not (with its outcome), newest first."""
    store = (await deps_of(request)).store
    records = [{"message_id": s.id, **s.data} for s in await store.letters.list_dead_letters()]
    return DeadLetters(dead_letters=[dead_letter_view(r) for r in newest_first(records, limit)])


@router.get("/poison", response_model=PoisonList, responses=OPERATOR_ERRORS,
            dependencies=operators_only, summary="Poison messages (operators)")
async def list_poison(request: Request, limit: RecordLimit = 100) -> PoisonList:
    """Messages acknowledged without effect (invalid, unscheduled, rejected), newest first."""
    records = newest_first(await (await deps_of(request)).store.letters.list_poison(), limit)
    return PoisonList(poison=[PoisonView(
        message_id=str(r.get("message_id") or ""), kind=_text(r, "kind"),
        reason=_text(r, "reason"), error=_text(r, "error"),
        subscription=_text(r, "subscription"), received_at=_seconds(r, "received_at"),
        data_preview=preview(r.get("data"))) for r in records])


@router.post("/dead-letters/{message_id}/redrive", response_model=RedriveResult,
             responses={409: {"model": ErrorBody, "description": "Re-driven before."},
                        **OPERATOR_ERRORS},
             dependencies=operators_only, summary="Re-drive a dead letter (operators)")
async def redrive_dead_letter(
    request: Request, message_id: Annotated[str, PathParam(min_length=1, max_length=1500)],
) -> RedriveResult:
    """Reopen the dead letter's run if it failed by dead-lettering and re-publish the message
    to its topic, as ``ackloop runs redrive --message`` does."""
    deps = await deps_of(request)
    record = await deps.store.letters.get_dead_letter(message_id)
    if record is None:
        raise ApiError(404, "not_found", f"no dead letter {message_id}")
    if record.get("redriven_at") is not None:
        raise ApiError(409, "conflict", f"dead letter {message_id} was re-driven already "
                       f"({record.get('redrive_outcome')})")
    done = await redrive(deps.store, deps.publisher, deps.settings, deps.clock,
                         message_ids=[str(record["message_id"])])
    if not done:  # re-driven by someone else between the read and now
        raise ApiError(409, "conflict", f"dead letter {message_id} was re-driven already")
    (result,) = done
    return RedriveResult(message_id=result.message_id, run_id=result.run_id, step=result.step,
                         outcome=result.outcome, cause=result.cause)
