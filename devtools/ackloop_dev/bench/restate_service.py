"""The Restate peer's service: the reference workload as a Restate handler (an ASGI app).

Served by hypercorn (``python -m hypercorn --bind 127.0.0.1:PORT
ackloop_dev.bench.restate_service:app``) and registered with a local ``restate-server`` by
:mod:`ackloop_dev.bench.restate_side`. A run is model -> tool -> model -> tool -> model, each
call an instant ``ctx.run`` (journaled by the server before the next one starts), each
recording when it ran; the handler returns those timings.
"""

from __future__ import annotations

import time

import restate

REFERENCE_CALLS = 2

reference = restate.Service("reference")


async def model_call(turn: int, calls: int) -> list[float]:
    """The instant scripted model: a tool call until ``calls`` were made, then the answer."""
    start = time.time()
    _decision = "tool" if turn < calls else "answer"
    return [start, time.time()]


async def tool_call(turn: int) -> list[float]:
    """The instant tool."""
    start = time.time()
    _value = {"key": "k", "value": "42", "turn": turn}
    return [start, time.time()]


@reference.handler()
async def run(ctx: restate.Context, calls: int) -> list[list[float]]:
    """One reference run; each step's [start, end], in order."""
    timings = []
    for turn in range(calls + 1):
        timings.append(await ctx.run_typed("model", model_call, turn=turn, calls=calls))
        if turn < calls:
            timings.append(await ctx.run_typed("tool", tool_call, turn=turn))
    return timings


app = restate.app(services=[reference])
