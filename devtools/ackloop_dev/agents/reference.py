"""The benchmark's workload agents: ``reference``, model -> tool -> model -> tool -> model
with an instant tool, so what is measured is the engine and not the tools; ``reference-long``,
the same loop with as many tool calls as the question asks (``calls=N``), to measure how the
cost of a step grows with the length of the conversation. Each carries its offline script,
like any user's agent (``Agent(script=...)``)."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from ackloop.agents.agent import Agent
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.transcript import Exchange, read_exchange
from ackloop.tools.definition import tool

REFERENCE_TOOL = "bench_lookup"
PAD_TOOL = "bench_pad"
REFERENCE_CALLS = 2
_CALLS_ASKED = re.compile(r"\bcalls=(\d{1,4})\b")
_PAD_ASKED = re.compile(r"\bpad=(\d{1,6})\b")


class BenchLookup(BaseModel):
    """Arguments of the benchmark tool."""

    key: str = Field(default="k", description="Any key; the answer does not depend on it.")


@tool(REFERENCE_TOOL)
async def bench_lookup(args: BenchLookup) -> dict[str, str]:
    """Return a fixed record at once (the benchmark's instant tool)."""
    return {"key": args.key, "value": "42"}


class BenchPad(BaseModel):
    """Arguments of the padding tool."""

    words: int = Field(default=1000, ge=1, le=200_000, description="Words to return.")


@tool(PAD_TOOL, max_output_bytes=2 * 1024 * 1024)
async def bench_pad(args: BenchPad) -> str:
    """Return as many words as asked at once: what makes a conversation's prompts long."""
    return "lorem " * args.words


def bench_agents() -> list[Agent]:
    """The benchmark's workload agents (an instant tool; long budgets for ``reference-long``)."""
    return [
        Agent("reference", "Call bench_lookup twice, then answer.", [bench_lookup],
              script=reference_script),
        Agent(
            "reference-long",
            "Call bench_lookup as many times as the question says, then answer.",
            [bench_lookup],
            script=reference_script,
            max_steps=1000,
            max_seconds=3600.0,
            max_tool_calls=1000,
        ),
        Agent(
            "reference-padded",
            "Call bench_pad as many times as the question says, then answer.",
            [bench_pad],
            script=padded_script,
            max_steps=1000,
            max_seconds=3600.0,
            max_tool_calls=1000,
        ),
    ]


def reference_calls(request: ModelRequest) -> int:
    """How many tool calls the question asks for (``calls=N``), else :data:`REFERENCE_CALLS`."""
    return _calls_asked(read_exchange(request.contents))


def _calls_asked(exchange: Exchange) -> int:
    found = _CALLS_ASKED.search(exchange.question)
    return int(found[1]) if found else REFERENCE_CALLS


def reference_script(request: ModelRequest) -> ModelTurn:
    """The benchmark agents' offline script: the reference loop, as many calls as asked (the
    history read once for both)."""
    from ackloop.model.scripted import reference_turn

    exchange = read_exchange(request.contents)
    return reference_turn(request, exchange, REFERENCE_TOOL, {"key": "k"},
                          calls=_calls_asked(exchange))


def padded_script(request: ModelRequest) -> ModelTurn:
    """``reference-padded``'s script: ``calls=N`` calls of the padding tool, each returning
    ``pad=W`` words (default 1000), then the answer: each prompt longer than the one before by
    about W tokens."""
    from ackloop.model.scripted import reference_turn

    exchange = read_exchange(request.contents)
    found = _PAD_ASKED.search(exchange.question)
    words = int(found[1]) if found else 1000
    return reference_turn(request, exchange, PAD_TOOL, {"words": words},
                          calls=_calls_asked(exchange))
