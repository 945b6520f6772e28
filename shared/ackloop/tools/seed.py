"""The seed agent's tools: weather alerts for a US state, the public IP, and where an IP is.

They call api.weather.gov, an IP echo (icanhazip) and ip-api through ONE process-wide
``httpx.AsyncClient`` passed in, with base URLs from :class:`~ackloop.config.settings.Settings`
(point
them at ``ackloop_dev.fakes.sandbox_apis``, in ackloop-dev, to run offline). Every failure the
model can act on is a :class:`~ackloop.tools.errors.ToolError` written for it.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx
from pydantic import BaseModel, Field, field_validator

from ackloop.config.settings import Settings
from ackloop.tools.definition import typed_tool
from ackloop.tools.errors import ToolError
from ackloop.tools.parameters import NoArguments
from ackloop.tools.toolset import ToolSet
from ackloop.tools.us_areas import STATE_NAMES

USER_AGENT = "ackloop-agent/0.1 (weather alerts tool)"
MAX_ALERTS_LISTED = 10
MAX_AREA_CHARS = 300
_NAME_TO_CODE = {name.lower(): code for code, name in STATE_NAMES.items()}


class GetWeatherAlertsRequest(BaseModel):
    """Request model for getting weather alerts."""

    state: str = Field(
        description="Two-letter US state or territory code (e.g. CA, NY, DC, PR).",
        min_length=2,
        max_length=2,
    )

    @field_validator("state", mode="before")
    @classmethod
    def _state_code(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        code = value.strip().upper()
        if code in STATE_NAMES:
            return code
        guess = _NAME_TO_CODE.get(value.strip().lower())
        hint = f"did you mean {guess}?" if guess else "use a code such as CA, NY or TX"
        raise ValueError(f"{value!r} is not a two-letter US state or territory code; {hint}")


class GetLocationRequest(BaseModel):
    """Request model for getting location info from an IP address."""

    ipaddress: str = Field(description="A public IPv4 or IPv6 address, e.g. 203.0.113.7.")

    @field_validator("ipaddress", mode="before")
    @classmethod
    def _ip(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            return str(ipaddress.ip_address(value.strip()))
        except ValueError:
            raise ValueError(
                f"{value!r} is not an IP address; pass one such as 203.0.113.7 "
                "(get_ip_address returns this machine's)"
            ) from None


class SeedApis:
    """The three seed tools as methods over an injected HTTP client."""

    def __init__(self, http: httpx.AsyncClient, settings: Settings) -> None:
        self._http = http
        self._nws = settings.nws_base_url.rstrip("/")
        self._ip_echo = settings.ip_echo_url
        self._ipapi = settings.ipapi_base_url.rstrip("/")
        # Half the tool's budget per HTTP phase: a slow upstream becomes a ToolError the model
        # reads ("did not answer within"), well before the framework's own cut.
        self._timeout_seconds = settings.tool_timeout_seconds / 2
        self._timeout = httpx.Timeout(self._timeout_seconds)

    async def get_weather_alerts(self, request: GetWeatherAlertsRequest) -> dict[str, Any]:
        """Active NWS alerts for one state: the count and a compact line per alert."""
        response = await self._get(
            "the weather service",
            f"{self._nws}/alerts/active/area/{request.state}",
            headers={"User-Agent": USER_AGENT, "Accept": "application/geo+json"},
        )
        if response.status_code == 400:
            raise ToolError(
                f"the weather service does not know the area {request.state!r}; "
                "use a two-letter US state code"
            )
        _raise_for_status("the weather service", response)
        features = _json(response, "the weather service").get("features")
        if not isinstance(features, list):
            raise ToolError("the weather service answered without a list of alerts; try later")
        name = STATE_NAMES[request.state]
        alerts = [_alert_line(feature) for feature in features[:MAX_ALERTS_LISTED]]
        summary = (
            f"{len(features)} active weather alert(s) for {name} ({request.state})."
            if features
            else f"No active weather alerts for {name} ({request.state})."
        )
        if len(features) > MAX_ALERTS_LISTED:
            summary += f" Showing the first {MAX_ALERTS_LISTED}."
        return {
            "state": request.state,
            "count": len(features),
            "summary": summary,
            "alerts": alerts,
        }

    async def get_ip_address(self) -> str:
        """This machine's public IP address, as the echo service sees it."""
        response = await self._get("the IP echo service", self._ip_echo)
        _raise_for_status("the IP echo service", response)
        text = response.text.strip()
        try:
            return str(ipaddress.ip_address(text))
        except ValueError:
            raise ToolError("the IP echo service answered something that is not an IP") from None

    async def get_location_info(self, request: GetLocationRequest) -> dict[str, Any]:
        """City, region and country of an IP, with the region code for US locations."""
        service = "the IP geolocation service"
        response = await self._get(service, f"{self._ipapi}/json/{request.ipaddress}")
        if response.status_code == 429:
            raise ToolError(f"{service} is rate-limiting requests; try again in a minute")
        _raise_for_status(service, response)
        data = _json(response, service)
        if data.get("status") != "success":
            raise ToolError(_lookup_failure(request.ipaddress, str(data.get("message", ""))))
        city, region, country = data.get("city"), data.get("regionName"), data.get("country")
        return {
            "location": ", ".join(str(part) for part in (city, region, country) if part),
            "city": city,
            "regionName": region,
            "region": data.get("region"),
            "country": country,
            "countryCode": data.get("countryCode"),
        }

    async def _get(
        self, service: str, url: str, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        try:
            return await self._http.get(url, headers=headers, timeout=self._timeout)
        except httpx.TimeoutException:
            raise ToolError(
                f"{service} did not answer within {self._timeout_seconds:g} s; try again later"
            ) from None
        except httpx.TransportError as exc:
            raise ToolError(
                f"{service} could not be reached ({type(exc).__name__}); try again later"
            ) from None


def _raise_for_status(service: str, response: httpx.Response) -> None:
    if response.status_code >= 500:
        raise ToolError(f"{service} failed (HTTP {response.status_code}); try again later")
    if response.is_error:
        raise ToolError(f"{service} refused the request (HTTP {response.status_code})")


def _json(response: httpx.Response, service: str) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise ToolError(f"{service} returned an unreadable answer; try again later")
    return data


def _alert_line(feature: Any) -> dict[str, Any]:
    props = feature.get("properties", {}) if isinstance(feature, dict) else {}
    area = str(props.get("areaDesc") or "")
    if len(area) > MAX_AREA_CHARS:
        area = area[: MAX_AREA_CHARS - 3] + "..."
    return {
        "event": props.get("event"),
        "headline": props.get("headline"),
        "severity": props.get("severity"),
        "areaDesc": area,
    }


def _lookup_failure(ip: str, message: str) -> str:
    if message in ("private range", "reserved range"):
        return (
            f"{ip} is in a {message} and has no public location; call get_ip_address for "
            "the public IP and look that up instead"
        )
    if message == "invalid query":
        return f"{ip} was rejected as an invalid query; pass a public IP address"
    return f"the IP geolocation service could not locate {ip}: {message or 'no reason given'}"


def seed_toolset(http: httpx.AsyncClient, settings: Settings) -> ToolSet:
    """The seed agent's three tools over ``http`` (the process-wide client; the caller closes it).

    All three only read, so all are ``retry_safe``.
    """
    apis = SeedApis(http, settings)
    timeout = settings.tool_timeout_seconds
    return ToolSet(
        [
            typed_tool(
                "get_weather_alerts",
                "Get the active weather alerts (watches, warnings, advisories) for a US state or "
                "territory from the US National Weather Service. Returns how many alerts there "
                "are and, for each, its event, headline, severity and affected areas.",
                GetWeatherAlertsRequest,
                apis.get_weather_alerts,
                timeout_seconds=timeout,
            ),
            typed_tool(
                "get_ip_address",
                "Get the public IP address of the machine the agent runs on. Use it with "
                "get_location_info to find out where the user is.",
                NoArguments,
                apis.get_ip_address,
                timeout_seconds=timeout,
            ),
            typed_tool(
                "get_location_info",
                "Get the location of a public IP address: city, region (state) and country. "
                "For US locations, 'region' is the two-letter state code get_weather_alerts "
                "takes.",
                GetLocationRequest,
                apis.get_location_info,
                timeout_seconds=timeout,
            ),
        ]
    )
