"""How a benchmark hands over its figures: printed as JSON, and written to ``--json`` too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def printed(found: dict[str, Any], path: Path | None) -> int:
    """Print ``found`` as JSON (and write it to ``path``, if given); the exit code, 0."""
    text = json.dumps(found, indent=2)
    print(text)
    if path:
        path.write_text(text)
    return 0
