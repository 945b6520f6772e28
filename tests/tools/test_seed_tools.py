"""The seed tools against httpx.MockTransport with recorded-shape bodies: no network."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.genai import types

from ackloop.config.settings import Settings
from ackloop.domain.wire import FunctionCall
from ackloop.tools.base import ToolContext, ToolOutcome
from ackloop.tools.seed import seed_toolset

GOLDEN = Path(__file__).parent / "golden"
Responder = Callable[[httpx.Request], httpx.Response]


class FakeUpstream:
    """Answers with ``responder`` and keeps every request it saw."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.responder(request)


def golden(name: str) -> Any:
    return json.loads((GOLDEN / name).read_text())


def settings() -> Settings:
    return Settings(tool_timeout_seconds=4.0)


@pytest.fixture
async def tool_run(context: ToolContext) -> AsyncIterator[Callable[..., Any]]:
    clients: list[httpx.AsyncClient] = []

    async def run(responder: Responder, name: str, **args: Any) -> tuple[ToolOutcome, FakeUpstream]:
        upstream = FakeUpstream(responder)
        client = httpx.AsyncClient(transport=httpx.MockTransport(upstream))
        clients.append(client)
        tools = seed_toolset(client, settings())
        return await tools.execute(FunctionCall(name=name, args=args), context), upstream

    yield run
    for client in clients:
        await client.aclose()


def never_called(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"no request expected, got {request.url}")


async def test_weather_alerts_are_summarised(tool_run: Callable[..., Any]) -> None:
    outcome, upstream = await tool_run(
        lambda r: httpx.Response(200, json=golden("nws_alerts_CA.json")),
        "get_weather_alerts",
        state="ca",
    )
    assert not outcome.is_error
    assert outcome.response["result"] == {
        "state": "CA",
        "count": 2,
        "summary": "2 active weather alert(s) for California (CA).",
        "alerts": [
            {
                "event": "Heat Advisory",
                "headline": "Heat Advisory issued July 8 at 2:15AM PDT until July 9 at 8:00PM "
                "PDT by NWS San Francisco CA",
                "severity": "Moderate",
                "areaDesc": "Santa Lucia Mountains and Los Padres National Forest; Southern "
                "Salinas Valley/Arroyo Seco and Lake San Antonio",
            },
            {
                "event": "Red Flag Warning",
                "headline": "Red Flag Warning issued July 8 at 3:02AM PDT until July 8 at "
                "9:00PM PDT by NWS Las Vegas NV",
                "severity": "Severe",
                "areaDesc": "Eastern Sierra Slopes of Inyo County",
            },
        ],
    }
    (request,) = upstream.requests
    assert str(request.url) == "https://api.weather.gov/alerts/active/area/CA"
    assert request.headers["Accept"] == "application/geo+json"
    assert request.headers["User-Agent"].startswith("ackloop")


async def test_weather_alerts_accept_the_seed_s_nested_arguments(
    tool_run: Callable[..., Any],
) -> None:
    empty = {"type": "FeatureCollection", "features": [], "title": "Current watches"}
    outcome, upstream = await tool_run(
        lambda r: httpx.Response(200, json=empty), "get_weather_alerts", request={"state": "NY"}
    )
    assert outcome.response["result"] == {
        "state": "NY",
        "count": 0,
        "summary": "No active weather alerts for New York (NY).",
        "alerts": [],
    }
    assert upstream.requests[0].url.path == "/alerts/active/area/NY"


async def test_many_alerts_are_listed_up_to_ten(tool_run: Callable[..., Any]) -> None:
    feature = golden("nws_alerts_CA.json")["features"][0]
    body = {"type": "FeatureCollection", "features": [feature] * 14}
    outcome, _ = await tool_run(
        lambda r: httpx.Response(200, json=body), "get_weather_alerts", state="CA"
    )
    result = outcome.response["result"]
    assert result["count"] == 14 and len(result["alerts"]) == 10
    assert result["summary"].endswith("Showing the first 10.")


@pytest.mark.parametrize(
    ("state", "hint"),
    [
        ("ZZ", "'ZZ' is not a two-letter US state or territory code; use a code such as CA"),
        (
            "California",
            "'California' is not a two-letter US state or territory code; did you mean CA?",
        ),
    ],
)
async def test_a_bad_state_is_refused_before_any_request(
    tool_run: Callable[..., Any], state: str, hint: str
) -> None:
    outcome, upstream = await tool_run(never_called, "get_weather_alerts", state=state)
    assert outcome.is_error
    assert outcome.response["error"].startswith(
        f"invalid arguments for get_weather_alerts: state: {hint}"
    )
    assert upstream.requests == []


@pytest.mark.parametrize("state", ["DC", "PR", "GU", "VI", "AS", "MP", "wy"])
async def test_dc_and_territories_are_states_too(tool_run: Callable[..., Any], state: str) -> None:
    body = {"type": "FeatureCollection", "features": []}
    outcome, _ = await tool_run(
        lambda r: httpx.Response(200, json=body), "get_weather_alerts", state=state
    )
    assert outcome.response["result"]["state"] == state.upper()


@pytest.mark.parametrize(
    ("responder", "message"),
    [
        (
            lambda r: httpx.Response(503, text="upstream unavailable"),
            "the weather service failed (HTTP 503); try again later",
        ),
        (
            lambda r: httpx.Response(400, json={"title": "Bad Request", "status": 400}),
            "the weather service does not know the area 'CA'; use a two-letter US state code",
        ),
        (
            lambda r: httpx.Response(403, text="Forbidden"),
            "the weather service refused the request (HTTP 403)",
        ),
        (
            lambda r: httpx.Response(200, text="<html>maintenance</html>"),
            "the weather service returned an unreadable answer; try again later",
        ),
    ],
)
async def test_weather_failures_are_written_for_the_model(
    tool_run: Callable[..., Any], responder: Responder, message: str
) -> None:
    outcome, _ = await tool_run(responder, "get_weather_alerts", state="CA")
    assert outcome == ToolOutcome(response={"error": message}, is_error=True)


async def test_a_weather_timeout_is_written_for_the_model(tool_run: Callable[..., Any]) -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    outcome, _ = await tool_run(slow, "get_weather_alerts", state="CA")
    assert outcome.response == {
        "error": "the weather service did not answer within 2 s; try again later"
    }


async def test_an_unreachable_service_is_written_for_the_model(
    tool_run: Callable[..., Any],
) -> None:
    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    outcome, _ = await tool_run(refused, "get_ip_address")
    assert outcome.response == {
        "error": "the IP echo service could not be reached (ConnectError); try again later"
    }


async def test_ip_address_is_the_echoed_text(tool_run: Callable[..., Any]) -> None:
    outcome, upstream = await tool_run(
        lambda r: httpx.Response(200, text="198.51.100.23\n"), "get_ip_address"
    )
    assert outcome.response == {"result": "198.51.100.23"}
    assert str(upstream.requests[0].url) == "https://icanhazip.com"


async def test_ip_address_rejects_a_page_that_is_not_an_ip(tool_run: Callable[..., Any]) -> None:
    outcome, _ = await tool_run(lambda r: httpx.Response(200, text="<html>"), "get_ip_address")
    assert outcome.response == {"error": "the IP echo service answered something that is not an IP"}


async def test_location_info_names_city_region_and_country(tool_run: Callable[..., Any]) -> None:
    outcome, upstream = await tool_run(
        lambda r: httpx.Response(200, json=golden("ipapi_success.json")),
        "get_location_info",
        request={"ipaddress": " 8.8.8.8 "},
    )
    assert outcome.response["result"] == {
        "location": "Ashburn, Virginia, United States",
        "city": "Ashburn",
        "regionName": "Virginia",
        "region": "VA",
        "country": "United States",
        "countryCode": "US",
    }
    assert str(upstream.requests[0].url) == "http://ip-api.com/json/8.8.8.8"


async def test_a_private_ip_becomes_advice_for_the_model(tool_run: Callable[..., Any]) -> None:
    body = {"status": "fail", "message": "private range", "query": "192.168.1.10"}
    outcome, _ = await tool_run(
        lambda r: httpx.Response(200, json=body), "get_location_info", ipaddress="192.168.1.10"
    )
    assert outcome.response == {
        "error": "192.168.1.10 is in a private range and has no public location; call "
        "get_ip_address for the public IP and look that up instead"
    }


async def test_rate_limiting_becomes_advice_for_the_model(tool_run: Callable[..., Any]) -> None:
    outcome, _ = await tool_run(
        lambda r: httpx.Response(429, headers={"X-Rl": "0", "X-Ttl": "42"}),
        "get_location_info",
        ipaddress="8.8.8.8",
    )
    assert outcome.response == {
        "error": "the IP geolocation service is rate-limiting requests; try again in a minute"
    }


async def test_a_bad_ip_is_refused_before_any_request(tool_run: Callable[..., Any]) -> None:
    outcome, upstream = await tool_run(never_called, "get_location_info", ipaddress="my house")
    assert outcome.is_error
    assert outcome.response["error"].startswith(
        "invalid arguments for get_location_info: ipaddress: 'my house' is not an IP address"
    )
    assert upstream.requests == []


async def test_seed_declarations_are_flat_and_accepted_by_google_genai() -> None:
    async with httpx.AsyncClient(transport=httpx.MockTransport(never_called)) as client:
        tools = seed_toolset(client, settings())
    declarations = tools.declarations()
    assert [d["name"] for d in declarations] == [
        "get_weather_alerts",
        "get_ip_address",
        "get_location_info",
    ]
    for declaration in declarations:
        types.FunctionDeclaration.model_validate(declaration)
    assert declarations[0]["parameters"] == {
        "type": "object",
        "properties": {
            "state": {
                "type": "string",
                "minLength": 2,
                "maxLength": 2,
                "description": "Two-letter US state or territory code (e.g. CA, NY, DC, PR).",
            }
        },
        "required": ["state"],
    }
    assert "parameters" not in declarations[1]
    assert all(tools.is_retry_safe(name) for name in tools.names)
