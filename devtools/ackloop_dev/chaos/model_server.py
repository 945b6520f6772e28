"""The fake Gemini server with a ledger: which request (run and turn) got which answer or fault.

``python -m ackloop_dev.chaos.model_server --port N --ledger FILE`` serves exactly what
:class:`~ackloop_dev.fakes.gemini_server.FakeGeminiServer` serves (the scripted seed agent over the
Gemini REST API, with the same admin fault injection; the ``research-team`` agents each by its
own script), and appends one JSON line per
``generateContent`` request to ``FILE``: the run's reference (``(ref ...)`` in its question, the
last user text of the request: earlier runs of the conversation come before it), the turn (model
contents after that question), how many contents it carried and how many of them were history
(the conversation's earlier runs), the first 40 characters of its system instruction (which
agent of a team asked: a sub-agent's question carries its parent's reference), the fault
served (``null`` for a normal answer) and whether the body held the canary secret
(``ACKLOOP_CHAOS_CANARY``).

``--ref-faults FILE`` (a JSON object ``{ref prefix: fault spec}``, re-read when it changes)
serves a fault to every request of the runs whose reference starts with a prefix, before and
regardless of the scheduled faults: one run can be poisoned while the others go on.
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

from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import Script, ScriptedModel
from ackloop_dev.chaos.workload import question_text, reference_of
from ackloop_dev.fakes.gemini_faults import Fault, parse_fault_spec
from ackloop_dev.fakes.gemini_quota import QUOTA, Refusal
from ackloop_dev.fakes.gemini_server import FakeGeminiServer, RecordedRequest


def describe(body: dict[str, Any], canary: str) -> dict[str, Any]:
    """What the ledger keeps of one request body."""
    contents = body.get("contents") or []
    history, question = 0, ""
    for index, content in enumerate(contents):
        text = question_text(content)
        if text is not None:
            history, question = index, text
    turn = sum(1 for c in contents[history:] if c.get("role") == "model")
    instruction = body.get("systemInstruction") or body.get("system_instruction") or {}
    said = " ".join(str(p.get("text", "")) for p in instruction.get("parts") or []
                    if isinstance(p, dict)) if isinstance(instruction, dict) else ""
    return {
        "instructions": said[:40],
        "ref": reference_of(question),
        "turn": turn,
        "contents": len(contents),
        "history": history,
        "secret": bool(canary) and canary in json.dumps(body),
    }


class RefFaults:
    """Faults by run reference prefix, from a JSON file re-read when it changes."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._rules: dict[str, Fault] = {}
        self._lock = threading.Lock()

    def _load(self) -> dict[str, Fault]:
        if self._path is None:
            return {}
        try:
            info = self._path.stat()
            stamp = (info.st_ino, info.st_mtime_ns)  # each write is a new file, renamed in
        except FileNotFoundError:
            return {}
        with self._lock:
            if stamp != self._stamp:
                raw = json.loads(self._path.read_text() or "{}")
                self._rules = {str(k): parse_fault_spec(str(v))[0] for k, v in raw.items() if v}
                self._stamp = stamp
            return self._rules

    def fault_for(self, ref: str | None) -> Fault | None:
        if not ref:
            return None
        rules = self._load()
        matches = [prefix for prefix in rules if ref.startswith(prefix)]
        return rules[max(matches, key=len)] if matches else None


def chaos_policy() -> Script:
    """The seed agent, as the fake server plays it, and the ``research-team`` agents (the
    child-runs scenario's) and ``follow-up`` (the sleeps scenario's) each by its own
    script."""
    from ackloop.agents.scripts import deployment_script
    from ackloop.config.settings import Settings
    from ackloop_dev.agents import with_catalog
    from ackloop_dev.agents.follow_up import NAME as FOLLOW_UP
    from ackloop_dev.agents.research_team import research_team_agents

    seed = ScriptedModel().decide
    catalog = deployment_script(with_catalog(Settings()))
    team_model = ScriptedModel(catalog).decide
    team = {agent.name for agent in research_team_agents()} | {FOLLOW_UP}

    def decide(request: ModelRequest) -> ModelTurn:
        return team_model(request) if catalog.agent_of(request) in team else seed(request)

    return decide


class LedgerGeminiServer(FakeGeminiServer):
    """:class:`FakeGeminiServer` that writes every request and its fault to a JSON-lines file."""

    def __init__(self, ledger: IO[str], canary: str, ref_faults: Path | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._ledger = ledger
        self._canary = canary
        self._ledger_lock = threading.Lock()
        self._ref_faults = RefFaults(ref_faults)

    def record(self, request: RecordedRequest) -> Fault | Refusal | None:
        entry = describe(request.body, self._canary)
        fault: Fault | Refusal | None = self._ref_faults.fault_for(entry["ref"])
        entry["poisoned"] = fault is not None
        if fault is None:
            fault = super().record(request)
        entry["t"] = time.time()
        entry["fault"] = (None if fault is None else QUOTA if isinstance(fault, Refusal)
                          else fault.kind)
        if isinstance(fault, Fault) and fault.kind == "delay":
            entry["delay_s"] = fault.value
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
    parser.add_argument("--ref-faults", type=Path, default=None)
    args = parser.parse_args(argv)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with args.ledger.open("a", buffering=1) as ledger:
        server = LedgerGeminiServer(
            ledger, os.environ.get("ACKLOOP_CHAOS_CANARY", ""), args.ref_faults,
            policy=chaos_policy(), port=args.port)
        server.start()
        print(f"fake Gemini server (ledger {args.ledger}) listening on {server.url}", flush=True)
        stopping.wait()
        server.stop()


if __name__ == "__main__":
    main()
