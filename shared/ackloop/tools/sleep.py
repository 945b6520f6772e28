"""The built-in ``sleep`` tool: the model waits a while, or until a time, before it goes on.

Off unless an agent lists it (``tools=[..., sleep_tool()]``). A call sleeps as any tool that
sleeps does (``Tool.sleeps``: :mod:`ackloop.engine.waits`): no process runs and nothing is
delivered until its time, whatever its length, and the run then goes on with what the model
reads: when it slept until and when it woke.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from ackloop.tools.base import ToolContext
from ackloop.tools.definition import Tool, typed_tool

DEFAULT_MAX_SECONDS = 7 * 24 * 3600.0


class SleepArgs(BaseModel):
    seconds: float | None = Field(
        default=None, gt=0, description="How long to wait, in seconds (give this or until).")
    until: str | None = Field(
        default=None, description="An ISO 8601 time with its UTC offset to wait until, e.g. "
        "2026-12-24T08:00:00+01:00 (give this or seconds).")


def _until(text: str) -> dt.datetime:
    moment = dt.datetime.fromisoformat(text)
    if moment.tzinfo is None:
        raise ValueError(f"until {text!r} has no UTC offset: add one (+00:00 for UTC)")
    return moment


def sleep_tool(max_seconds: float = DEFAULT_MAX_SECONDS, name: str = "sleep") -> Tool:
    """A tool the model calls to wait ``seconds``, or ``until`` a time, at most
    ``max_seconds`` ahead (a longer wait is refused for the model, which may sleep again)."""
    if max_seconds <= 0:
        raise ValueError("max_seconds must be positive")

    def length(args: dict[str, Any]) -> float | dt.datetime:
        seconds, until = args.get("seconds"), args.get("until")
        if (seconds is None) == (until is None):
            raise ValueError("give seconds or until, not both and not neither")
        if until is not None:
            moment = _until(str(until))
            ahead = moment.timestamp() - dt.datetime.now(dt.UTC).timestamp()
            if ahead > max_seconds:
                raise ValueError(f"{until} is more than {max_seconds:.0f} s ahead: sleep at "
                                 "most that long, then again")
            return moment
        assert seconds is not None
        value = float(seconds)
        if not 0 < value <= max_seconds:
            raise ValueError(f"sleep between 0 and {max_seconds:.0f} s, not {value:g}")
        return value

    async def woke(args: SleepArgs, context: ToolContext) -> dict[str, Any]:
        event = context.event or {}
        return {"slept_until": event.get("slept_until"), "woke_at": event.get("woke_at")}

    return typed_tool(
        name,
        "Wait before going on: for a number of seconds, or until a time (ISO 8601 with its "
        f"UTC offset), at most {max_seconds:.0f} s ahead. Costs nothing while it waits.",
        SleepArgs, woke, sleeps=length)
