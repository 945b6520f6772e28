"""Model-layer fixtures: a fake Gemini server, the real google-genai client aimed at it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelClient, ModelRequest
from ackloop.model.gemini import GeminiModel
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

SEED_SYSTEM_INSTRUCTION = (
    "You are a helpful agent that can use tools to help the user.\n"
    "If no tools are needed, respond in haikus."
)

SEED_TOOLS: list[JsonDict] = [
    {
        "name": "get_weather_alerts",
        "description": "Get weather alerts for a US state.",
        "parameters_json_schema": {
            "type": "object",
            "properties": {"state": {"type": "string", "description": "Two-letter code"}},
            "required": ["state"],
        },
    },
    {"name": "get_ip_address", "description": "Get the public IP address of this machine."},
    {
        "name": "get_location_info",
        "description": "Get the location of an IP address.",
        "parameters_json_schema": {
            "type": "object",
            "properties": {"ipaddress": {"type": "string"}},
            "required": ["ipaddress"],
        },
    },
]


@pytest.fixture
def fake_gemini() -> Iterator[FakeGeminiServer]:
    """A fake server answering like the seed agent, with no faults scheduled."""
    with FakeGeminiServer() as server:
        yield server


@pytest.fixture
def gemini(fake_gemini: FakeGeminiServer) -> GeminiModel:
    """The production adapter, pointed at the fake server."""
    return GeminiModel(api_key="test-key", base_url=fake_gemini.url, timeout_seconds=5.0)


@pytest.fixture
def seed_tools() -> list[JsonDict]:
    """The seed's three function declarations, flat argument shape."""
    return SEED_TOOLS


ToolFn = Callable[[dict[str, Any]], JsonDict]
"""A fake tool: args in, ``{"result": ...}`` or ``{"error": ...}`` out."""


@dataclass
class LoopOutcome:
    answer: str | None
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    model_turns: int = 0
    contents: list[JsonDict] = field(default_factory=list)


async def _run_loop(
    model: ModelClient,
    question: str,
    tools: dict[str, ToolFn],
    declarations: list[JsonDict],
    *,
    system_instruction: str = "",
    max_turns: int = 10,
) -> LoopOutcome:
    """Model turns until one has no calls; every call runs and goes back as a function response.

    Contents are stored as JSON dicts between turns, exactly as the engine stores them.
    """
    outcome = LoopOutcome(answer=None, contents=[{"role": "user", "parts": [{"text": question}]}])
    for _ in range(max_turns):
        request = ModelRequest(
            model="gemini-test",
            system_instruction=system_instruction,
            contents=outcome.contents,
            tools=declarations,
        )
        turn = await model.generate(request)
        outcome.model_turns += 1
        if not turn.calls:
            outcome.answer = turn.text
            return outcome
        outcome.contents.append({"role": "model", "parts": turn.parts})
        responses = []
        for call in turn.calls:
            outcome.tool_calls.append((call.name, call.args))
            result = tools[call.name](call.args)
            response: JsonDict = {"name": call.name, "response": result}
            if call.id:
                response["id"] = call.id
            responses.append({"function_response": response})
        outcome.contents.append({"role": "user", "parts": responses})
    raise AssertionError(f"no answer after {max_turns} model turns")


RunLoop = Callable[..., Any]


@pytest.fixture
def run_loop() -> RunLoop:
    """``await run_loop(model, question, tools, declarations, ...)`` -> :class:`LoopOutcome`."""
    return _run_loop
