"""``follow-up``: an agent that sleeps before it acts, to try sleeps at once.

Its tool ``follow_up`` sleeps the seconds the question names ("follow up on A-7 in 30 s";
``in 2 h``, ``in 3 d``: hours, days) before it runs; the built-in ``sleep`` tool waits until a
time the question gives ("wake me at 2026-12-24T08:00:00+00:00"). Offline its model is a
script: it makes the one call the question asks for, then reports what came back, with when it
woke.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ackloop.agents.agent import Agent
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.transcript import read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.tools.base import ToolContext
from ackloop.tools.definition import tool
from ackloop.tools.sleep import sleep_tool

NAME = "follow-up"
INSTRUCTIONS = ("You follow up on orders when the user asks, after the delay they give; "
                "report what you did and when.")
_IN = re.compile(r"\bin\s+(\d{1,7}(?:\.\d+)?)\s*(s|sec|seconds?|m|min|minutes?|h|hours?|d|"
                 r"days?)\b", re.IGNORECASE)
_AT = re.compile(r"\bat\s+(\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:\d\d))")
_ORDER = re.compile(r"\b([A-Z]-\d{1,6})\b")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@tool(sleeps=lambda args: float(args["seconds"]), retry_safe=False)
def follow_up(order: str, seconds: float, context: ToolContext) -> dict[str, Any]:
    """Follow up on an order after a delay: the call sleeps that long, then runs.

    Args:
        order: The order to follow up on.
        seconds: How long to wait first, in seconds.
    """
    return {"followed_up": order, **(context.event or {})}


def follow_up_script(request: ModelRequest) -> ModelTurn:
    """The offline model: the call the question asks for, then a report of its result."""
    exchange = read_exchange(request.contents)
    if not exchange.results:
        question = exchange.question
        if at := _AT.search(question):
            return calls_turn([("sleep", {"until": at.group(1)})], request=request)
        found = _IN.search(question)
        seconds = float(found.group(1)) * _UNIT[found.group(2)[0].lower()] if found else 1.0
        order = _ORDER.search(question)
        return calls_turn([("follow_up", {"order": order.group(1) if order else "A-1",
                                          "seconds": seconds})], request=request)
    report = "; ".join(f"{r.name}: {json.dumps(r.response, sort_keys=True)}"
                       for r in exchange.results)
    return text_turn(report, request=request)


def follow_up_agent() -> Agent:
    return Agent(NAME, INSTRUCTIONS, [follow_up, sleep_tool()], script=follow_up_script)
