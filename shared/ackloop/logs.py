"""Logging: one JSON object per line (what Cloud Logging parses), secrets masked."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "severity": record.levelname,
            "message": record.getMessage(),
            "logger": record.name,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "INFO") -> None:
    root = logging.getLogger()
    if any(getattr(h, "_ackloop", False) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler._ackloop = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter())
    try:
        from ackloop.tools.masking import SecretMaskingFilter

        handler.addFilter(SecretMaskingFilter())
    except ImportError:  # pragma: no cover - the tools package always ships it
        pass
    root.addHandler(handler)
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "google", "grpc", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
