"""The one name for a JSON object as Python holds it: a document's fields, a message's data."""

from __future__ import annotations

from typing import Any

JsonDict = dict[str, Any]
