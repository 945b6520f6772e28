"""``GET /limits``: the deployment's model quotas, concurrency limits and spend limits as
declared, and what their limiters hold now (:mod:`ackloop.engine.limits_view`). For operators
only (``ACKLOOP_API_OPERATORS``): it tells of every caller's load."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from ackloop.api.auth import OPERATORS_SETTING, caller_of, is_operator
from ackloop.api.errors import ApiError
from ackloop.api.runs import ERRORS, deps_of
from ackloop.engine.limits_view import snapshot

router = APIRouter()


@router.get("/limits", responses=ERRORS, summary="The limits every process shares")
async def get_limits(request: Request) -> dict[str, Any]:
    """Each model quota as declared with its busy shards (calls counted in the last minute,
    calls waiting for their places, a 429's pause, an adaptive share), each concurrency
    limit with the keys holding or waiting for slots, each spend limit with this period's
    spend per key. Operators only."""
    if not is_operator(request):
        raise ApiError(403, "forbidden", f"the limits are for operators: add "
                       f"{caller_of(request)!r} to {OPERATORS_SETTING} to grant it")
    deps = await deps_of(request)
    return await snapshot(deps.settings, deps.store, deps.clock.now())
