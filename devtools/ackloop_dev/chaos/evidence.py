"""Evidence gathered after a chaos run: model requests, tool executions, secrets in the logs.

Model calls are counted by the model server's ledger (one line per request, with its run
reference, turn and the fault it got). Tool calls are counted from the tool function's own log
lines (``tool NAME run=... step=... attempt=N``: one per execution, written before the commit),
cross-checked against the sandbox APIs' request counters.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ackloop_dev.chaos.model_server import read_ledger

_TOOL_LINE = re.compile(r"tool (?P<name>\S+) run=(?P<run>\S+) step=(?P<step>\S+) attempt=\d+ ")
_GOOGLE_KEY = re.compile(r"AIza[0-9A-Za-z_-]{35}")


@dataclass
class ModelEvidence:
    """Per (ref, turn): answered normally, and faults served; plus context anomalies."""

    answered: Counter[tuple[str, int]] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    faults_by_ref: dict[str, Counter[str]] = field(default_factory=dict)
    secrets_in_context: int = 0
    bad_context: list[tuple[str, int, int]] = field(default_factory=list)
    """(ref, turn, contents) of requests whose own contents (after the conversation's history)
    were not 2*turn+1 entries long."""
    history: dict[tuple[str, int], set[int]] = field(default_factory=dict)
    """Per (ref, turn): the history lengths (earlier runs' contents) its requests carried."""
    requests: int = 0


def model_evidence(ledger: Path, refs: set[str], since: float = 0.0,
                   timeout_s: float = float("inf")) -> ModelEvidence:
    """Count the ledger entries of the runs named by ``refs`` (received after ``since``).

    A ``delay`` shorter than the model timeout ``timeout_s`` still answered; a longer one did
    not (the caller gave up first)."""
    found = ModelEvidence()
    for entry in read_ledger(ledger):
        ref = entry.get("ref")
        if ref not in refs or float(entry["t"]) < since:
            continue
        found.requests += 1
        turn = int(entry["turn"])
        history = int(entry.get("history", 0))
        found.history.setdefault((ref, turn), set()).add(history)
        if entry.get("secret"):
            found.secrets_in_context += 1
        if int(entry["contents"]) - history != 2 * turn + 1:
            found.bad_context.append((ref, turn, int(entry["contents"])))
        fault = entry.get("fault")
        if fault == "delay" and float(entry.get("delay_s") or 0.0) < timeout_s:
            fault = None
        if fault is None:
            found.answered[(ref, turn)] += 1
        else:
            found.faults[fault] += 1
            found.faults_by_ref.setdefault(ref, Counter())[fault] += 1
    return found


def log_matches(log_path: Path, pattern: re.Pattern[str]) -> Iterator[re.Match[str]]:
    """``pattern``'s match in each message of a function's log (JSON lines, or plain text)
    that has one; nothing when there is no log."""
    if not log_path.exists():
        return
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            message = str(json.loads(line).get("message", ""))
        except ValueError:
            message = line
        if (match := pattern.search(message)) is not None:
            yield match


def tool_executions(log_path: Path) -> Counter[tuple[str, str]]:
    """Executions per (run id, step key), from the tool function's log."""
    return Counter((m["run"], m["step"]) for m in log_matches(log_path, _TOOL_LINE))


def secrets_in_logs(logs_dir: Path, canary: str) -> dict[str, int]:
    """Files under ``logs_dir`` holding the canary key or any Google-API-key-shaped string."""
    hits: dict[str, int] = {}
    for path in sorted(logs_dir.rglob("*.log")):
        text = path.read_text(errors="replace")
        count = text.count(canary) + len(_GOOGLE_KEY.findall(text.replace(canary, "")))
        if count:
            hits[path.name] = count
    return hits


def sandbox_requests(stats: dict[str, dict[str, int]]) -> dict[str, int]:
    """Requests and faults the two sandboxes served."""
    nws, ipapi = stats["nws_ip"], stats["ipapi"]
    return {
        "requests": int(nws.get("requests", 0)) + int(ipapi.get("requests", 0)),
        "nws_500": int(nws.get("faults:500", 0)),
        "ipapi_timeouts": int(ipapi.get("faults:delay", 0)),
    }


def json_safe(value: Any) -> Any:
    """Counters keyed by tuples, made JSON-able."""
    if isinstance(value, dict):
        return {(" ".join(map(str, k)) if isinstance(k, tuple) else str(k)): json_safe(v)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
