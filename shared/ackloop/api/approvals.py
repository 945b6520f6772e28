"""Deciding a tool call that waits for a person: ``POST /runs/{run_id}/approvals/{step}``.

The decision is recorded on the step with who decided (the caller) and when, in one commit
conditional on the step as read: the first decision wins, the same one again answers the
recorded decision (200), another one 409. The step's message is then published again and the
step resumes through the ordinary path (:mod:`ackloop.engine.waits`). Owner-checked like
every run route.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ackloop.api.auth import caller_of
from ackloop.api.errors import ApiError, refused
from ackloop.api.models import ErrorBody
from ackloop.api.runs import ERRORS, RunId, deps_of, existing_run
from ackloop.domain.records import DEADLINE, StepDecision
from ackloop.domain.wire import check_json_value
from ackloop.engine.waits import core as waits
from ackloop.store import DecisionRefused
from ackloop.tools.arguments import InvalidArguments, parse_arguments
from ackloop.tools.definition import find_tool

MAX_DECISION_ARGS_BYTES = 64 * 1024
"""The most a decision's edited arguments may be, as Firestore sizes them."""

StepKeyParam = Annotated[str, PathParam(pattern=r"^\d{4}-tool-\d{3}$",
                                        description="The waiting step's key (0000-tool-000).")]

router = APIRouter(tags=["runs"])


class DecisionBody(BaseModel):
    """A decision on a waiting tool call."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject"]
    args: dict[str, Any] | None = Field(
        default=None, description="Approve with these arguments instead of the model's "
        "(validated against the tool's parameters).")
    comment: str | None = Field(default=None, max_length=2000,
                                description="Shown to the model with a rejection.")

    @field_validator("args")
    @classmethod
    def _storable(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_json_value(value, "args", MAX_DECISION_ARGS_BYTES)
        return value


class DecisionView(BaseModel):
    run_id: str
    step: str
    decision: Literal["approve", "reject", "received"] = Field(
        description="The decision recorded on the step.")
    args: dict[str, Any] | None
    comment: str | None
    by: str = Field(description="Who decided: the caller, or 'deadline'.")
    at: float = Field(description="When (Unix seconds).")
    recorded: bool = Field(description="False when this decision was already recorded.")


@router.post("/runs/{run_id}/approvals/{step}", response_model=DecisionView,
             responses={409: {"model": ErrorBody, "description": "The step is decided "
                              "otherwise, does not wait, or its run has ended."}, **ERRORS},
             summary="Approve or reject a waiting tool call")
async def decide(request: Request, run_id: RunId, step: StepKeyParam, body: DecisionBody
                 ) -> DecisionView:
    """Record the decision and resume the step: approve runs the tool (with ``args`` when
    given), reject makes the rejection and the comment the tool's result for the model.
    Idempotent: the same decision again answers the recorded one."""
    deps = await deps_of(request)
    caller = caller_of(request)
    run = await existing_run(deps, run_id, caller)
    if body.args is not None:
        if body.decision == "reject":
            raise ApiError(422, "invalid_request", "args go with an approval, not a rejection")
        (record,) = await deps.store.steps.get_steps(run_id, [step])
        tool = find_tool(deps.agents.get(run.agent).tools,
                         record.name if record is not None else "")
        if tool is not None:
            try:
                parse_arguments(tool, body.args)
            except InvalidArguments as exc:
                raise ApiError(422, "invalid_args", f"args do not fit {tool.name}: {exc}"
                               ) from exc
    decision = StepDecision(decision=body.decision, args=body.args, comment=body.comment,
                            by=caller, at=deps.clock.now())
    try:
        recorded, decided = await waits.resolve(deps, run_id, step, decision, "approval")
    except DecisionRefused as exc:
        raise refused(exc) from exc
    final = recorded.decision or decision
    if final.by == DEADLINE:
        # Decided after the deadline: the call was rejected as at its deadline (and re-sent so),
        # not as asked.
        raise ApiError(409, "deadline_passed", f"step {step} waited past its deadline "
                       f"({final.at:.0f}): the call is rejected, not {body.decision}d")
    return DecisionView(run_id=run_id, step=step, decision=final.decision, args=final.args,
                        comment=final.comment, by=final.by, at=final.at, recorded=decided)
