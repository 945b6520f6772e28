"""``GET /limits``: the deployment's model quotas, concurrency limits and spend limits in
force, and what their limiters hold now (:mod:`ackloop.engine.limits_view`); ``PUT /limits``:
set any of the three lists anew while the deployment runs (:mod:`ackloop.engine.live_limits`).
For operators only (``ACKLOOP_API_OPERATORS``): it tells of every caller's load, and changes
what every caller may do."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ackloop.api.auth import OPERATORS_SETTING, caller_of, is_operator
from ackloop.api.errors import ApiError
from ackloop.api.runs import ERRORS, deps_of
from ackloop.engine import live_limits
from ackloop.engine.limits_view import snapshot
from ackloop.engine.live_limits import LimitsChange

router = APIRouter()


def _operator(request: Request) -> None:
    if not is_operator(request):
        raise ApiError(403, "forbidden", f"the limits are for operators: add "
                       f"{caller_of(request)!r} to {OPERATORS_SETTING} to grant it")


@router.get("/limits", responses=ERRORS, summary="The limits every process shares")
async def get_limits(request: Request) -> dict[str, Any]:
    """Each model quota in force with its busy shards (calls counted in the last minute,
    calls waiting for their places, a 429's pause, an adaptive share), each concurrency
    limit with the keys holding or waiting for slots, each spend limit with this period's
    spend per key; ``set``: the lists set while the deployment runs, by whom and when.
    Operators only."""
    _operator(request)
    deps = await deps_of(request)
    return await snapshot(deps.settings, deps.store, deps.clock.now())


@router.put("/limits", responses=ERRORS, summary="Set limits while the deployment runs")
async def put_limits(change: LimitsChange, request: Request) -> dict[str, Any]:
    """Set the model quotas, the concurrency limits or the spend limits anew, in the form
    their settings take: each list given replaces the one in force, ``null`` goes back to
    the declared list, a list left out is kept. Every process applies it within
    ``limits_refresh_seconds``. Answers the limits as ``GET /limits`` does. Operators only."""
    _operator(request)
    deps = await deps_of(request)
    if deps.settings.limits_refresh_seconds <= 0:
        raise ApiError(409, "limits_fixed", "this deployment reads no limits set while it runs "
                       "(ACKLOOP_LIMITS_REFRESH_SECONDS=0): change the declared limits and "
                       "redeploy")
    if not change.model_fields_set:
        raise ApiError(422, "invalid_request", "give at least one of model_quotas, "
                       "concurrency_limits, spend_limits (a list, or null for the declared one)")
    await live_limits.change(deps.store, change, caller_of(request), deps.clock.now())
    return await snapshot(deps.settings, deps.store, deps.clock.now())
