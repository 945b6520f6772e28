"""The offline stand-in for Gemini: decides like a sensible agent for the seed's weather scenarios.

It knows three tools (``get_weather_alerts(state)``, ``get_ip_address()``,
``get_location_info(ipaddress)``) and reads everything from the request, so it is deterministic
and stateless: the same contents always produce the same turn, in any process.

- "weather alerts for New York / CA" -> get_weather_alerts -> answer
- "weather alerts where I am" -> get_ip_address -> get_location_info -> get_weather_alerts -> answer
- "where am I?" -> get_ip_address -> get_location_info -> answer
- "what is my ip address?" -> get_ip_address -> answer
- anything else -> a haiku, no tools (the seed's system instruction asks for haikus)
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from typing import Any

from ackloop.domain.errors import ModelPermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.wire import FunctionCall
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.transcript import Exchange, ToolResult, read_exchange
from ackloop.model.turns import calls_turn, text_turn
from ackloop.model.us_states import find_state_code, state_code_for_region

WEATHER_TOOL = "get_weather_alerts"
IP_TOOL = "get_ip_address"
LOCATION_TOOL = "get_location_info"
MODEL_VERSION = "scripted-seed-1"
MAX_TOOL_RESULTS = 8
"""A run that somehow collected this many results gets an answer instead of another call."""
MAX_LISTED_ALERTS = 5


def seed_agent_turn(request: ModelRequest, *, require_thought_signatures: bool = True) -> ModelTurn:
    """Decide the next turn for ``request``.

    Every call turn carries a thought signature on its first part, like Gemini 3. With
    ``require_thought_signatures`` the model, like Gemini 3, rejects a request whose earlier call
    turns in this run lost theirs (raises ``ModelPermanentError(reason="model_invalid_request")``):
    that is how an engine that rebuilds parts instead of replaying them is caught offline.
    """
    exchange = read_exchange(request.contents)
    if require_thought_signatures:
        _check_signatures(exchange)
    return _Decider(request, exchange).decide()


class _Decider:
    def __init__(self, request: ModelRequest, exchange: Exchange) -> None:
        self.request = request
        self.exchange = exchange
        self.question = exchange.question
        self.lowered = exchange.question.lower()
        self.tools = {str(d.get("name")): d for d in request.tools}

    def decide(self) -> ModelTurn:
        if len(self.exchange.results) >= MAX_TOOL_RESULTS:
            return self._say("I stopped here: I already made many tool calls without an answer.")
        if "weather" in self.lowered or "alert" in self.lowered:
            return self._weather()
        if re.search(r"\bip\b", self.lowered):
            return self._ip_only()
        if re.search(r"where am i|where i am|my location|locate me", self.lowered):
            return self._where()
        return self._say(haiku_for(self.question))

    def _weather(self) -> ModelTurn:
        state = find_state_code(self.question)
        if state is not None:
            return self._alerts(state, prefix="")
        located = self._locate()
        if isinstance(located, ModelTurn):
            return located
        location, region = located
        state = state_code_for_region(region)
        if state is None:
            return self._say(
                f"You appear to be in {location}, which is outside the US states weather.gov "
                "covers, so I can't check alerts there."
            )
        return self._alerts(state, prefix=f"You appear to be in {location}. ")

    def _alerts(self, state: str, *, prefix: str) -> ModelTurn:
        result = self.exchange.last_result(WEATHER_TOOL)
        if result is None:
            return self._call(WEATHER_TOOL, {"state": state})
        if result.error is not None:
            return self._say(
                f"{prefix}I couldn't get the weather alerts for {state}: {result.error}"
            )
        return self._say(prefix + summarize_alerts(state, result.result))

    def _ip_only(self) -> ModelTurn:
        ip = self._ip()
        if isinstance(ip, ModelTurn):
            return ip
        return self._say(f"Your public IP address is {ip}.")

    def _where(self) -> ModelTurn:
        located = self._locate()
        if isinstance(located, ModelTurn):
            return located
        return self._say(f"Based on your IP address, you are in {located[0]}.")

    def _ip(self) -> str | ModelTurn:
        """The caller's IP from the results, or the turn that gets it (or reports its failure)."""
        result = self.exchange.last_result(IP_TOOL)
        if result is None:
            return self._call(IP_TOOL, {})
        if result.error is not None:
            return self._say(f"I couldn't find your IP address: {result.error}")
        value = result.result
        if isinstance(value, dict):
            value = value.get("ip") or value.get("ipaddress") or value.get("query")
        return str(value).strip()

    def _locate(self) -> tuple[str, str] | ModelTurn:
        """``(location text, region name)`` from the results, or the next turn toward them."""
        ip = self._ip()
        if isinstance(ip, ModelTurn):
            return ip
        result = self.exchange.last_result(LOCATION_TOOL)
        if result is None:
            return self._call(LOCATION_TOOL, {"ipaddress": ip})
        if result.error is not None:
            return self._say(f"I couldn't look up where {ip} is: {result.error}")
        return _location_of(result)

    def _call(self, name: str, args: dict[str, Any]) -> ModelTurn:
        if name not in self.tools:
            return self._say(f"I can't answer that: the tool {name} is not available to me.")
        turn_number = len(self.exchange.model_contents)
        call = FunctionCall(
            name=name, args=shape_args(self.tools[name], args), id=f"call_{turn_number}_0"
        )
        signature = hashlib.sha256(f"{self.question}|{turn_number}".encode()).digest()[:24]
        return calls_turn(
            [call], thought_signature=signature, request=self.request, model_version=MODEL_VERSION
        )

    def _say(self, text: str) -> ModelTurn:
        return text_turn(text, request=self.request, model_version=MODEL_VERSION)


def shape_args(declaration: JsonDict, flat: dict[str, Any]) -> dict[str, Any]:
    """Fit flat args to a declaration: nested under its one object parameter when it has one.

    Declarations generated from a function taking one Pydantic model (as in the seed) wrap the
    fields: ``{"request": {"state": "CA"}}``; flat declarations take ``{"state": "CA"}``.
    """
    schema = declaration.get("parameters_json_schema") or declaration.get("parameters") or {}
    properties = schema.get("properties") or {}
    if not flat or any(key in properties for key in flat) or len(properties) != 1:
        return flat
    ((wrapper, inner),) = properties.items()
    if str(inner.get("type", "")).lower() == "object":
        return {wrapper: flat}
    return flat


def summarize_alerts(state: str, result: object) -> str:
    """One answer from a weather.gov alerts payload (or a tool's summary of one)."""
    payload = _maybe_json(result)
    items: list[Any] | None = None
    if isinstance(payload, dict):
        found = payload.get("features", payload.get("alerts"))
        items = found if isinstance(found, list) else None
    elif isinstance(payload, list):
        items = payload
    if items is None:
        return f"Here is what the weather service returned for {state}: {str(payload)[:500]}"
    if not items:
        return f"There are no active weather alerts for {state} right now."
    lines = [_alert_line(item) for item in items[:MAX_LISTED_ALERTS]]
    more = len(items) - len(lines)
    verb, plural = ("is", "") if len(items) == 1 else ("are", "s")
    text = f"There {verb} {len(items)} active weather alert{plural} for {state}:\n" + "\n".join(
        lines
    )
    return text + (f"\n...and {more} more." if more > 0 else "")


def haiku_for(question: str) -> str:
    """Three deterministic lines about the question's last meaningful word."""
    words = [w for w in re.findall(r"[a-zA-Z]+", question.lower()) if len(w) > 2 and w not in _STOP]
    topic = words[-1] if words else "silence"
    first, second, third = _HAIKUS[zlib.crc32(question.encode()) % len(_HAIKUS)]
    return "\n".join((first.format(topic=topic), second, third))


_STOP = frozenset({"the", "and", "for", "you", "tell", "about", "what", "please", "can", "give"})
_HAIKUS = (
    ("You ask for a {topic}", "the wind carries no tool call", "only quiet words"),
    ("A {topic}, you say", "clouds drift past without a map", "here is my small verse"),
    ("Thinking of {topic}", "no weather, no address sought", "just seventeen beats"),
)


def _alert_line(item: object) -> str:
    if isinstance(item, dict):
        props = item.get("properties", item)
        event = props.get("event") or "Alert"
        headline = props.get("headline") or props.get("areaDesc") or ""
        return f"- {event}: {headline}" if headline else f"- {event}"
    return f"- {item}"


def _location_of(result: ToolResult) -> tuple[str, str]:
    value = _maybe_json(result.result)
    if isinstance(value, dict):
        city, region = value.get("city", ""), value.get("regionName") or value.get("region", "")
        country = value.get("country", "")
        return ", ".join(str(v) for v in (city, region, country) if v), str(region)
    text = str(value).strip()
    pieces = [piece.strip() for piece in text.split(",")]
    # The seed's tool answers "City, Region, Country".
    region = pieces[1] if len(pieces) >= 3 else pieces[0]
    return text, region


def _maybe_json(value: object) -> object:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _check_signatures(exchange: Exchange) -> None:
    for content in exchange.model_contents:
        calls = [part for part in content.get("parts") or [] if "function_call" in part]
        if calls and not calls[0].get("thought_signature"):
            name = calls[0]["function_call"].get("name")
            raise ModelPermanentError(
                f"function call {name!r} in this run was sent back without its thought_signature "
                "(Gemini 3 rejects this: replay the model's parts unchanged)",
                reason="model_invalid_request",
            )
