"""The agent that :mod:`ackloop_dev.bench.step_profile` runs (``ACKLOOP_AGENTS`` of its stack).

``step-profile`` is the benchmark's ``reference-long`` agent (its script: as many
``bench_lookup`` calls as the question's ``calls=N`` asks, then an answer, so a run makes
2N+1 steps, model -> tool -> ... -> model) with one change: its tool waits
``ACKLOOP_BENCH_TOOL_SECONDS`` (default 0, instant) before answering, so the same profile can
be taken with slow tools. A slow model is the fake Gemini server's business (a delay on every
answer), not the agent's.
"""

from __future__ import annotations

import asyncio
import os

from ackloop.agents.agent import Agent
from ackloop.tools.definition import tool
from ackloop_dev.agents.reference import REFERENCE_TOOL, BenchLookup, reference_script

AGENT = "step-profile"
TOOL_SECONDS = "ACKLOOP_BENCH_TOOL_SECONDS"


def tool_seconds() -> float:
    """How long each tool call waits (the environment's :data:`TOOL_SECONDS`, else 0)."""
    return max(0.0, float(os.environ.get(TOOL_SECONDS) or 0.0))


@tool(REFERENCE_TOOL)
async def bench_lookup(args: BenchLookup) -> dict[str, str]:
    """Return a fixed record after the configured wait (no wait by default)."""
    if (seconds := tool_seconds()) > 0:
        await asyncio.sleep(seconds)
    return {"key": args.key, "value": "42"}


def agents() -> list[Agent]:
    """The catalog of the profile's stack: the one agent, with budgets for long runs."""
    return [Agent(AGENT, "Call bench_lookup as many times as the question says, then answer.",
                  [bench_lookup], script=reference_script, max_steps=1000, max_seconds=3600.0,
                  max_tool_calls=1000)]
