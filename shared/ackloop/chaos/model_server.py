"""The fake Gemini server with a ledger: which request (run and turn) got which answer or fault.

``python -m ackloop.chaos.model_server --port N --ledger FILE`` serves exactly what
:class:`~ackloop.model.fake_server.FakeGeminiServer` serves (the scripted seed agent over the
Gemini REST API, with the same admin fault injection), and appends one JSON line per
``generateContent`` request to ``FILE``: the run's reference (``(ref ...)`` in the question), the
turn (model contents already in the request), how many contents it carried, the fault served
(``null`` for a normal answer) and whether the body held the canary secret
(``ACKLOOP_CHAOS_CANARY``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import IO, Any

from ackloop.chaos.workload import reference_of
from ackloop.model.fake_faults import Fault
from ackloop.model.fake_server import FakeGeminiServer, RecordedRequest


def describe(body: dict[str, Any], canary: str) -> dict[str, Any]:
    """What the ledger keeps of one request body."""
    contents = body.get("contents") or []
    first_text = ""
    for content in contents:
        texts = [p.get("text", "") for p in content.get("parts") or [] if "text" in p]
        if content.get("role", "user") == "user" and texts:
            first_text = " ".join(texts)
            break
    return {
        "ref": reference_of(first_text),
        "turn": sum(1 for c in contents if c.get("role") == "model"),
        "contents": len(contents),
        "secret": bool(canary) and canary in json.dumps(body),
    }


class LedgerGeminiServer(FakeGeminiServer):
    """:class:`FakeGeminiServer` that writes every request and its fault to a JSON-lines file."""

    def __init__(self, ledger: IO[str], canary: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ledger = ledger
        self._canary = canary
        self._ledger_lock = threading.Lock()

    def record(self, request: RecordedRequest) -> Fault | None:
        fault = super().record(request)
        entry = describe(request.body, self._canary)
        entry["t"] = time.time()
        entry["fault"] = None if fault is None else fault.kind
        with self._ledger_lock:
            self._ledger.write(json.dumps(entry) + "\n")
            self._ledger.flush()
        return fault


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The ledger's entries, oldest first (a torn last line is skipped)."""
    entries = []
    for line in path.read_text().splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(description="Fake Gemini server with a request ledger.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--ledger", type=Path, required=True)
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with args.ledger.open("a", buffering=1) as ledger:
        server = LedgerGeminiServer(
            ledger, os.environ.get("ACKLOOP_CHAOS_CANARY", ""), port=args.port
        )
        server.start()
        print(f"fake Gemini server (ledger {args.ledger}) listening on {server.url}", flush=True)
        stopping.wait()
        server.stop()


if __name__ == "__main__":
    main()
