"""Deterministic offline stand-ins for what api.weather.gov, ip-api and icanhazip return.

Same input, same answer (timestamps aside), in each API's real shape. The echoed public IP
(:data:`ECHO_IP`) locates to Norman, Oklahoma, and Oklahoma always has active alerts, so "are
there any weather alerts where I am?" exercises all three tools.
"""

from __future__ import annotations

import hashlib
import ipaddress
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from ackloop.tools.us_areas import MARINE_AREAS, STATE_NAMES

ECHO_IP = "203.0.113.7"
"""The "public" IP the sandbox echoes: TEST-NET-3, reserved for documentation."""

QUIET_AREAS = frozenset({"AZ", "DC", "HI", "NV", "UT", "VT", "AS", "GU", "MP", "VI"})
"""Areas that never have active alerts in the sandbox."""

# Documentation ranges stand in for public addresses here (real ip-api calls them reserved).
_DOCUMENTATION_NETS = tuple(
    ipaddress.ip_network(net)
    for net in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32")
)
_PRIVATE_NETS = tuple(
    ipaddress.ip_network(net)
    for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7")
)


class Place(NamedTuple):
    city: str
    region_name: str
    region: str
    country: str
    country_code: str
    zip: str
    lat: float
    lon: float
    timezone: str


# fmt: off
NORMAN_OK = Place("Norman", "Oklahoma", "OK", "United States", "US", "73019",
                  35.2226, -97.4395, "America/Chicago")
_PLACES = (
    NORMAN_OK,
    Place("Ashburn", "Virginia", "VA", "United States", "US", "20149",
          39.03, -77.5, "America/New_York"),
    Place("Mountain View", "California", "CA", "United States", "US", "94043",
          37.4192, -122.0574, "America/Los_Angeles"),
    Place("Phoenix", "Arizona", "AZ", "United States", "US", "85004",
          33.4484, -112.074, "America/Phoenix"),
    Place("Miami", "Florida", "FL", "United States", "US", "33101",
          25.7617, -80.1918, "America/New_York"),
    Place("Denver", "Colorado", "CO", "United States", "US", "80202",
          39.7392, -104.9903, "America/Denver"),
    Place("San Juan", "San Juan", "PR", "Puerto Rico", "PR", "00901",
          18.4655, -66.1057, "America/Puerto_Rico"),
    Place("Toronto", "Ontario", "ON", "Canada", "CA", "M5H",
          43.6532, -79.3832, "America/Toronto"),
    Place("South Brisbane", "Queensland", "QLD", "Australia", "AU", "4101",
          -27.4766, 153.0166, "Australia/Brisbane"),
)
# fmt: on
_FIXED_PLACES = {ECHO_IP: NORMAN_OK, "8.8.8.8": _PLACES[1], "1.1.1.1": _PLACES[-1]}


class _Event(NamedTuple):
    event: str
    severity: str
    certainty: str
    urgency: str
    response: str
    description: str
    instruction: str


# fmt: off
_EVENTS = (
    _Event("Tornado Watch", "Severe", "Possible", "Future", "Monitor",
           "Conditions are favorable for the development of tornadoes in and close to the "
           "watch area.",
           "Review your severe weather safety plan."),
    _Event("Severe Thunderstorm Warning", "Severe", "Observed", "Immediate", "Shelter",
           "A severe thunderstorm capable of 60 mph wind gusts and quarter size hail is "
           "moving east at 35 mph.",
           "Move to an interior room on the lowest floor of a building."),
    _Event("Flood Watch", "Moderate", "Possible", "Future", "Prepare",
           "Excessive rainfall may cause flooding of rivers, creeks and low-lying areas.",
           "Monitor later forecasts and be alert for possible flood warnings."),
    _Event("Heat Advisory", "Moderate", "Likely", "Expected", "Execute",
           "Heat index values up to 108 expected.",
           "Drink plenty of fluids, stay in an air-conditioned room and out of the sun."),
    _Event("Wind Advisory", "Moderate", "Likely", "Expected", "Execute",
           "West winds 25 to 35 mph with gusts up to 55 mph expected.",
           "Use extra caution when driving, especially in a high profile vehicle."),
    _Event("Winter Storm Warning", "Moderate", "Likely", "Expected", "Prepare",
           "Heavy snow expected. Total snow accumulations of 8 to 14 inches.",
           "If you must travel, keep a flashlight, food and water in your vehicle."),
    _Event("Red Flag Warning", "Severe", "Likely", "Expected", "Prepare",
           "Gusty winds and low relative humidity will create critical fire weather.",
           "Avoid outdoor burning and any activity that could start a fire."),
    _Event("Dense Fog Advisory", "Minor", "Likely", "Expected", "Execute",
           "Visibility one quarter mile or less in dense fog.",
           "Slow down, use your headlights and leave plenty of distance ahead."),
)
# fmt: on
# Where the echoed IP locates: a tornado watch and a thunderstorm warning, always.
_FIXED_EVENTS = {"OK": (0, 1)}
_PARTS = ("Northern", "Central", "Southern", "Eastern", "Western")


def is_known_area(area: str) -> bool:
    """True for the state, territory and marine codes weather.gov accepts."""
    return area in STATE_NAMES or area in MARINE_AREAS


def alert_count(area: str) -> int:
    """How many alerts ``area`` has in the sandbox: 0 for :data:`QUIET_AREAS`, else 1-3."""
    if area in QUIET_AREAS or not is_known_area(area):
        return 0
    if area in _FIXED_EVENTS:
        return len(_FIXED_EVENTS[area])
    return 1 + _digest(area) % 3


def alerts_collection(area: str, base_url: str, now: datetime | None = None) -> dict[str, Any]:
    """The ``/alerts/active/area/{area}`` GeoJSON FeatureCollection for a known ``area``."""
    now = (now or datetime.now(UTC)).replace(minute=0, second=0, microsecond=0)
    name = STATE_NAMES.get(area, area)
    features = [_feature(area, name, index, base_url, now) for index in range(alert_count(area))]
    return {
        "@context": [
            "https://geojson.org/geojson-ld/geojson-context.jsonld",
            {"@version": "1.1", "wx": "https://api.weather.gov/ontology#", "@vocab": "wx:"},
        ],
        "type": "FeatureCollection",
        "features": features,
        "title": f"Current watches, warnings, and advisories for {name}",
        "updated": _iso(now),
    }


def bad_area_problem(area: str, base_url: str) -> dict[str, Any]:
    """weather.gov's ``application/problem+json`` body for an area it does not know."""
    correlation = hashlib.sha256(area.encode()).hexdigest()[:8]
    return {
        "correlationId": correlation,
        "parameterErrors": [
            {"parameter": "path.area", "message": "Does not have a value in the enumeration"}
        ],
        "title": "Bad Request",
        "type": "https://api.weather.gov/problems/BadRequest",
        "status": 400,
        "detail": "Bad Request",
        "instance": f"{base_url}/requests/{correlation}",
    }


def ipapi_lookup(query: str) -> dict[str, Any]:
    """ip-api's ``/json/{query}`` body: a location, or ``status: fail`` with ip-api's reason."""
    try:
        address = ipaddress.ip_address(query)
    except ValueError:
        return {"status": "fail", "message": "invalid query", "query": query}
    if any(address in net for net in _PRIVATE_NETS):
        return {"status": "fail", "message": "private range", "query": query}
    documentation = any(address in net for net in _DOCUMENTATION_NETS)
    if not documentation and not address.is_global:
        return {"status": "fail", "message": "reserved range", "query": query}
    place = _FIXED_PLACES.get(str(address)) or _PLACES[_digest(str(address)) % len(_PLACES)]
    return {
        "status": "success",
        "country": place.country,
        "countryCode": place.country_code,
        "region": place.region,
        "regionName": place.region_name,
        "city": place.city,
        "zip": place.zip,
        "lat": place.lat,
        "lon": place.lon,
        "timezone": place.timezone,
        "isp": "Example Networks",
        "org": "Example Networks Sandbox",
        "as": "AS64500 Example Networks",
        "query": str(address),
    }


def _feature(area: str, name: str, index: int, base_url: str, now: datetime) -> dict[str, Any]:
    fixed = _FIXED_EVENTS.get(area)
    event = _EVENTS[fixed[index] if fixed else (_digest(area) + index * 3) % len(_EVENTS)]
    office = f"NWS {name}"
    part = _PARTS[(_digest(area) + index) % len(_PARTS)]
    zone = f"{area}Z{(_digest(area) + index * 11) % 90 + 10:03d}"
    oid = f"urn:oid:2.49.0.1.840.0.{hashlib.sha256(f'{area}{index}'.encode()).hexdigest()[:40]}"
    url = f"{base_url}/alerts/{oid}"
    sent, expires = now - timedelta(hours=1 + index), now + timedelta(hours=6 + index)
    when = f"{expires:%b %-d at %-I:%M%p} UTC"
    area_desc = f"Central {name}" if part == "Central" else f"{part} {name}; Central {name}"
    return {
        "id": url,
        "type": "Feature",
        "geometry": None,
        "properties": {
            "@id": url,
            "@type": "wx:Alert",
            "id": oid,
            "areaDesc": area_desc,
            "geocode": {"SAME": [f"0{_digest(zone) % 90000 + 10000}"], "UGC": [zone]},
            "affectedZones": [f"{base_url}/zones/forecast/{zone}"],
            "references": [],
            "sent": _iso(sent),
            "effective": _iso(sent),
            "onset": _iso(sent),
            "expires": _iso(expires),
            "ends": _iso(expires),
            "status": "Actual",
            "messageType": "Alert",
            "category": "Met",
            "severity": event.severity,
            "certainty": event.certainty,
            "urgency": event.urgency,
            "event": event.event,
            "sender": "w-nws.webmaster@noaa.gov",
            "senderName": office,
            "headline": f"{event.event} issued {sent:%b %-d at %-I:%M%p} UTC until {when} "
            f"by {office}",
            "description": f"* WHAT...{event.description}\n\n* WHERE...{part} {name}.",
            "instruction": event.instruction,
            "response": event.response,
            "parameters": {"NWSheadline": [f"{event.event.upper()} IN EFFECT"]},
        },
    }


def _digest(text: str) -> int:
    # hash() is salted per process; the sandbox must answer the same in every process.
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")
