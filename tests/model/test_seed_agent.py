"""The scripted model plays the seed agent: each scenario makes the expected calls and answer."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ackloop.domain.errors import ModelPermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelRequest
from ackloop.model.gemini import GeminiModel
from ackloop.model.scripted import ScriptedModel
from ackloop.model.seed_agent import haiku_for, shape_args
from ackloop_dev.fakes.gemini_server import FakeGeminiServer

IP = "203.0.113.7"
ALERTS = {
    "features": [
        {"properties": {"event": "Flood Warning", "headline": "Flood Warning until 6 PM"}},
        {"properties": {"event": "Wind Advisory", "headline": "Wind Advisory tonight"}},
    ]
}


def tools(
    *, location: str = "Albany, New York, United States", alerts: JsonDict = ALERTS
) -> dict[str, Any]:
    return {
        "get_ip_address": lambda args: {"result": IP},
        "get_location_info": lambda args: {"result": location},
        "get_weather_alerts": lambda args: {"result": json.dumps(alerts)},
    }


async def test_alerts_for_a_named_state(run_loop: Any, seed_tools: list[JsonDict]) -> None:
    outcome = await run_loop(
        ScriptedModel(), "Are there any weather alerts for New York?", tools(), seed_tools
    )

    assert outcome.tool_calls == [("get_weather_alerts", {"state": "NY"})]
    assert outcome.model_turns == 2
    assert "2 active weather alerts for NY" in outcome.answer
    assert "Flood Warning" in outcome.answer and "Wind Advisory" in outcome.answer


async def test_alerts_for_a_state_code_with_none_active(
    run_loop: Any, seed_tools: list[JsonDict]
) -> None:
    outcome = await run_loop(
        ScriptedModel(), "weather alerts for CA", tools(alerts={"features": []}), seed_tools
    )

    assert outcome.tool_calls == [("get_weather_alerts", {"state": "CA"})]
    assert outcome.answer == "There are no active weather alerts for CA right now."


async def test_alerts_where_i_am_chains_three_tools(
    run_loop: Any, seed_tools: list[JsonDict]
) -> None:
    outcome = await run_loop(
        ScriptedModel(), "are there any weather alerts where I am?", tools(), seed_tools
    )

    assert outcome.tool_calls == [
        ("get_ip_address", {}),
        ("get_location_info", {"ipaddress": IP}),
        ("get_weather_alerts", {"state": "NY"}),
    ]
    assert outcome.model_turns == 4
    assert outcome.answer.startswith("You appear to be in Albany, New York, United States.")


async def test_where_am_i_and_my_ip(run_loop: Any, seed_tools: list[JsonDict]) -> None:
    where = await run_loop(ScriptedModel(), "where am I?", tools(), seed_tools)
    ip = await run_loop(ScriptedModel(), "what is my ip address?", tools(), seed_tools)

    assert [name for name, _ in where.tool_calls] == ["get_ip_address", "get_location_info"]
    assert where.answer == "Based on your IP address, you are in Albany, New York, United States."
    assert ip.tool_calls == [("get_ip_address", {})]
    assert ip.answer == f"Your public IP address is {IP}."


async def test_no_tools_needed_gives_a_deterministic_haiku(
    run_loop: Any, seed_tools: list[JsonDict]
) -> None:
    outcome = await run_loop(ScriptedModel(), "tell me a joke", tools(), seed_tools)

    assert outcome.tool_calls == []
    assert outcome.answer == haiku_for("tell me a joke")
    assert len(outcome.answer.splitlines()) == 3 and "joke" in outcome.answer


async def test_a_tool_error_is_relayed_honestly_without_retrying(
    run_loop: Any, seed_tools: list[JsonDict]
) -> None:
    failing = tools() | {"get_weather_alerts": lambda args: {"error": "weather.gov returned 503"}}
    outcome = await run_loop(ScriptedModel(), "weather alerts for Texas?", failing, seed_tools)

    assert outcome.tool_calls == [("get_weather_alerts", {"state": "TX"})]
    assert outcome.answer == "I couldn't get the weather alerts for TX: weather.gov returned 503"


async def test_outside_the_us_stops_after_locating(
    run_loop: Any, seed_tools: list[JsonDict]
) -> None:
    abroad = tools(location="Lisbon, Lisbon, Portugal")
    outcome = await run_loop(ScriptedModel(), "any weather alerts near me?", abroad, seed_tools)

    assert [name for name, _ in outcome.tool_calls] == ["get_ip_address", "get_location_info"]
    assert "outside the US" in outcome.answer


async def test_the_same_scenario_through_the_real_sdk_and_fake_server(
    run_loop: Any, seed_tools: list[JsonDict], fake_gemini: FakeGeminiServer, gemini: GeminiModel
) -> None:
    outcome = await run_loop(
        gemini, "are there any weather alerts where I am?", tools(), seed_tools
    )

    assert [name for name, _ in outcome.tool_calls] == [
        "get_ip_address",
        "get_location_info",
        "get_weather_alerts",
    ]
    assert "2 active weather alerts for NY" in outcome.answer
    assert fake_gemini.stats()["requests"] == 4


async def test_a_call_replayed_without_its_thought_signature_is_rejected(
    run_loop: Any, seed_tools: list[JsonDict]
) -> None:
    model = ScriptedModel()
    first = await run_loop(model, "weather alerts for CA", tools(), seed_tools, max_turns=10)
    stripped = [
        {
            "role": c["role"],
            "parts": [{k: v for k, v in p.items() if k != "thought_signature"} for p in c["parts"]],
        }
        for c in first.contents
    ]
    request = ModelRequest(model="m", system_instruction="", contents=stripped, tools=seed_tools)

    with pytest.raises(ModelPermanentError) as caught:
        await model.generate(request)
    assert caught.value.reason == "model_invalid_request"


def test_args_nest_under_a_single_object_parameter_like_the_seed_declares() -> None:
    nested = {
        "name": "get_weather_alerts",
        "parameters": {
            "type": "OBJECT",
            "properties": {"request": {"type": "OBJECT", "properties": {"state": {}}}},
        },
    }
    flat = {"name": "get_weather_alerts", "parameters": {"properties": {"state": {}}}}

    assert shape_args(nested, {"state": "CA"}) == {"request": {"state": "CA"}}
    assert shape_args(flat, {"state": "CA"}) == {"state": "CA"}
