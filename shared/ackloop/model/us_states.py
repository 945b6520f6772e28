"""US state names and their two-letter codes, as the weather.gov alerts API expects them."""

from __future__ import annotations

import re

STATE_CODES: dict[str, str] = {
    "alabama": "AL", "alaska": "AK", "arizona": "AZ", "arkansas": "AR", "california": "CA",
    "colorado": "CO", "connecticut": "CT", "delaware": "DE", "district of columbia": "DC",
    "florida": "FL", "georgia": "GA", "hawaii": "HI", "idaho": "ID", "illinois": "IL",
    "indiana": "IN", "iowa": "IA", "kansas": "KS", "kentucky": "KY", "louisiana": "LA",
    "maine": "ME", "maryland": "MD", "massachusetts": "MA", "michigan": "MI", "minnesota": "MN",
    "mississippi": "MS", "missouri": "MO", "montana": "MT", "nebraska": "NE", "nevada": "NV",
    "new hampshire": "NH", "new jersey": "NJ", "new mexico": "NM", "new york": "NY",
    "north carolina": "NC", "north dakota": "ND", "ohio": "OH", "oklahoma": "OK", "oregon": "OR",
    "pennsylvania": "PA", "puerto rico": "PR", "rhode island": "RI", "south carolina": "SC",
    "south dakota": "SD", "tennessee": "TN", "texas": "TX", "utah": "UT", "vermont": "VT",
    "virginia": "VA", "washington": "WA", "west virginia": "WV", "wisconsin": "WI",
    "wyoming": "WY",
}  # fmt: skip

_CODES = frozenset(STATE_CODES.values())
# Longest names first so "west virginia" wins over "virginia" and "new york" over nothing shorter.
_NAMES = sorted(STATE_CODES, key=len, reverse=True)


def find_state_code(text: str) -> str | None:
    """The state a sentence names: a full name anywhere, or an upper-case code as its own word.

    Codes must be written in capitals ("CA"), so English words like "in", "me" or "or" never
    count as Indiana, Maine or Oregon.
    """
    lowered = text.lower()
    for name in _NAMES:
        if re.search(rf"\b{re.escape(name)}\b", lowered):
            return STATE_CODES[name]
    # The last code wins: "OK, any alerts for CA?" asks about California.
    codes = [token for token in re.findall(r"\b[A-Z]{2}\b", text) if token in _CODES]
    return codes[-1] if codes else None


def state_code_for_region(region: str) -> str | None:
    """Code for a region name as geolocation services spell it ("New York", "CA", "Texas")."""
    cleaned = region.strip()
    if cleaned.upper() in _CODES and len(cleaned) == 2:
        return cleaned.upper()
    return STATE_CODES.get(cleaned.lower())
