"""What the security tier observes: answers and how long they took, every document a request
wrote, secrets in logs/documents/messages, tool calls no ledger records, a process's memory.

Everything here talks to real processes (a stack of :mod:`tests.support.stack`) over real HTTP
and to the Firestore emulator; nothing is mocked.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from google.cloud import firestore

from ackloop.bus.delivery import load_policy
from ackloop.domain.records import StepRecord
from tests.security.figures import FIGURES
from tests.support.stack import RunningStack

FUNCTIONS = ("ingest", "model_step", "tool_step", "dead_letter")
SLACK_S = 10.0
"""Added to a service's request timeout before a request counts as a hang."""


def bound_s(service: str) -> float:
    """How long a request to ``service`` may take: its request timeout (delivery.json, the same
    number Cloud Run enforces in production), plus slack."""
    return load_policy().request_timeout_s[service] + SLACK_S


# -- requests ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    service: str
    method: str
    path: str
    content: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    label: str = ""
    api: bool = False
    """An HTTP API request (counted as a request) rather than a push envelope."""


@dataclass(frozen=True)
class Answer:
    probe: Probe
    status: int | None
    """None: no answer within the bound, or the connection dropped."""
    seconds: float
    body: bytes = b""

    def describe(self) -> str:
        return (f"{self.probe.service} {self.probe.method} {self.probe.path} "
                f"[{self.probe.label}] -> {self.status} in {self.seconds:.1f} s: "
                f"{self.body[:160]!r} (sent {self.probe.content[:160]!r})")


async def _send(client: httpx.AsyncClient, stack: RunningStack, probe: Probe) -> Answer:
    url = f"http://127.0.0.1:{stack.state.ports[probe.service]}{probe.path}"
    began = time.monotonic()
    try:
        response = await client.request(probe.method, url, content=probe.content,
                                        headers=list(probe.headers),
                                        timeout=bound_s(probe.service))
        return Answer(probe, response.status_code, time.monotonic() - began, response.content)
    except httpx.HTTPError as exc:
        return Answer(probe, None, time.monotonic() - began, repr(exc).encode())


def send(stack: RunningStack, probes: Iterable[Probe]) -> list[Answer]:
    """Send ``probes`` concurrently; count them, their 5xx, hangs and hold times in FIGURES."""

    async def all_of(batch: list[Probe]) -> list[Answer]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(limits=limits) as client:
            return list(await asyncio.gather(*(_send(client, stack, p) for p in batch)))

    answers = asyncio.run(all_of(list(probes)))
    for answer in answers:
        record(answer)
    return answers


def record(answer: Answer) -> None:
    if answer.probe.api:
        FIGURES.requests += 1
    else:
        FIGURES.envelopes += 1
    FIGURES.held(f"{answer.probe.service} {answer.probe.label}", answer.seconds)
    if answer.status is None:
        FIGURES.hangs += 1
        FIGURES.sample("no answer: " + answer.describe())
    elif answer.status >= 500:
        FIGURES.server_errors += 1
        FIGURES.sample("5xx: " + answer.describe())


def failures(answers: Iterable[Answer]) -> list[str]:
    """The answers that break "never a 5xx, never a hang"."""
    return [a.describe() for a in answers if a.status is None or a.status >= 500]


# -- documents --------------------------------------------------------------------------------


def firestore_client(stack: RunningStack) -> firestore.Client:
    return firestore.Client(project=stack.settings.project_id)


def documents(stack: RunningStack, client: firestore.Client | None = None,
              with_data: bool = False) -> dict[str, Any]:
    """Every document of the stack's collections, by path: its update time (or its data).

    Includes documents whose parent does not exist (``list_documents`` shows missing documents
    that have subcollections), so a write under a path nobody created is seen too.
    """
    db = client or firestore_client(stack)
    prefix = stack.settings.collection_prefix
    found: dict[str, Any] = {}

    def walk(collection: Any, depth: int) -> None:
        for snap in collection.stream():
            found[snap.reference.path] = snap.to_dict() if with_data else str(snap.update_time)
        if depth > 6:
            return
        for ref in collection.list_documents():
            for sub in ref.collections():
                walk(sub, depth + 1)

    for top in db.collections():
        if top.id.startswith(prefix):
            walk(top, 0)
    return found


def changed(before: Mapping[str, Any], after: Mapping[str, Any]) -> set[str]:
    """Paths created, updated or deleted between two :func:`documents` snapshots."""
    return {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}


def own_record(stack: RunningStack, path: str) -> bool:
    """A rejected message may leave one record of itself: ``poison/{id}`` or
    ``dead_letters/{id}``, directly under the collection."""
    prefix = stack.settings.collection_prefix
    parts = path.split("/")
    return len(parts) == 2 and parts[0] in (f"{prefix}poison", f"{prefix}dead_letters")


def under(stack: RunningStack, path: str, run_ids: Iterable[str],
          conversation_ids: Iterable[str]) -> bool:
    prefix = stack.settings.collection_prefix
    roots = {f"{prefix}runs/{r}" for r in run_ids} | {
        f"{prefix}conversations/{c}" for c in conversation_ids}
    return any(path == root or path.startswith(root + "/") for root in roots)


# -- the ledger and the tool sandbox ----------------------------------------------------------

SANDBOX_ENDPOINT = {"get_ip_address": "ip", "get_location_info": "ipapi",
                    "get_weather_alerts": "alerts"}


def all_runs(stack: RunningStack) -> list[dict[str, Any]]:
    db = firestore_client(stack)
    return [s.to_dict() | {"run_id": s.id}
            for s in db.collection(f"{stack.settings.collection_prefix}runs").stream()]


def wait_for(what: str, check: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


def finish_all(stack: RunningStack, timeout: float) -> list[dict[str, Any]]:
    """Wait until every run of the stack has ended; its runs."""
    wait_for("every run ended", lambda: all(
        r.get("status") in ("completed", "failed", "cancelled") for r in all_runs(stack)),
        timeout)
    return all_runs(stack)


def ledger(stack: RunningStack, run_id: str) -> list[StepRecord]:
    db = firestore_client(stack)
    steps = db.collection(f"{stack.settings.collection_prefix}runs/{run_id}/steps").stream()
    return [StepRecord.model_validate(s.to_dict()) for s in steps]


def unrecorded_tool_calls(stack: RunningStack) -> dict[str, int]:
    """Per sandbox endpoint, calls the sandbox served beyond the completed tool steps that all
    the stack's ledgers record (every seed tool makes one HTTP call per execution)."""
    recorded: dict[str, int] = {}
    for run in all_runs(stack):
        for step in ledger(stack, run["run_id"]):
            endpoint = SANDBOX_ENDPOINT.get(step.name)
            if step.kind == "tool" and endpoint and step.completed_at is not None:
                recorded[endpoint] = recorded.get(endpoint, 0) + step.attempts
    served = stack.sandbox_stats()
    extra = {}
    for endpoint in SANDBOX_ENDPOINT.values():
        over = served.get(f"requests:{endpoint}", 0) - recorded.get(endpoint, 0)
        if over > 0:
            extra[endpoint] = over
    return extra


def ledger_problems(steps: list[StepRecord]) -> list[str]:
    """Steps of one run's ledger that no committed model step asked for: a tool step must be a
    call of the previous model step's outbox (same turn, index and name), a model step must
    follow a completed model step whose calls all completed."""
    by_key = {s.key: s for s in steps}
    asked: dict[str, str] = {}
    for step in steps:
        if step.kind != "model" or step.completed_at is None:
            continue
        for out in step.outbox:
            if out.target_step and "-tool-" in out.target_step:
                call = out.data.get("call", {})
                asked[out.target_step] = str(call.get("name"))
    problems = []
    for step in steps:
        if step.kind == "tool" and asked.get(step.key) != step.name:
            problems.append(f"{step.key} {step.name!r} was never asked for "
                            f"(the model asked {asked.get(step.key)!r})")
        if step.kind == "model" and step.turn > 0:
            previous = by_key.get(f"{step.turn - 1:04d}-model")
            if previous is None or previous.completed_at is None:
                problems.append(f"{step.key} has no completed model step before it")
    return problems


# -- secrets ----------------------------------------------------------------------------------


def secret_hits(stack: RunningStack, secrets: Iterable[str],
                answers: Iterable[Mapping[str, Any]] = ()) -> list[str]:
    """Where any of ``secrets`` appears: log lines of every process of the stack, the spans
    it exported (traces: attributes, events, status) and its metric points, every document of
    its collections, the answers given."""
    secrets = [s for s in secrets if s]
    hits: list[str] = []
    root = Path(stack.state.directory)
    outputs = [*sorted((root / "logs").glob("*.log")), *sorted((root / "traces").glob("*")),
               *sorted((root / "metrics").glob("*"))]
    assert any(p.parent.name == "traces" for p in outputs), "the stack exported no spans"
    for log in outputs:
        if not log.is_file():
            continue
        for number, line in enumerate(log.read_text(errors="replace").splitlines(), 1):
            if any(s in line for s in secrets):
                hits.append(f"{log.parent.name}/{log.name}:{number}: {line[:200]}")
    for path, data in documents(stack, with_data=True).items():
        text = json.dumps(data, default=str)
        if any(s in text for s in secrets):
            hits.append(f"document {path}")
    for answer in answers:
        if any(s in json.dumps(answer) for s in secrets):
            hits.append(f"answer of run {answer.get('run_id')}")
    return hits


class KeyReflectingUpstream:
    """A Gemini endpoint in front of the fake one: a request whose body holds
    :attr:`MARKER` is refused with an error that quotes the caller's API key (503 on the first
    request of a body, 400 after); everything else is forwarded unchanged."""

    MARKER = "reflect-the-key"

    def __init__(self) -> None:
        self.upstream = ""
        self.reflected = 0
        self._seen: set[bytes] = set()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                key = self.headers.get("x-goog-api-key", "")
                if outer.MARKER.encode() in body:
                    outer.reflected += 1
                    code = 400 if body in outer._seen else 503
                    outer._seen.add(body)
                    payload = json.dumps({"error": {
                        "code": code,
                        "status": "UNAVAILABLE" if code == 503 else "INVALID_ARGUMENT",
                        "message": f"API key {key} is not valid for this project (key={key})"}})
                    self._answer(code, payload.encode(), "application/json")
                    return
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "content-length")}
                response = httpx.request(self.command, outer.upstream + self.path,
                                         content=body, headers=headers, timeout=120)
                self._answer(response.status_code, response.content,
                             response.headers.get("content-type", "application/json"))

            def _answer(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _relay

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# -- processes ---------------------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    """Resident memory of a live process, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@contextmanager
def rss_sampler(pid: int, every_s: float = 0.2) -> Iterator[list[float]]:
    """Sample ``pid``'s RSS in the background; the yielded list fills with MiB readings."""
    readings: list[float] = [rss_mib(pid)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every_s):
            try:
                readings.append(rss_mib(pid))
            except (OSError, RuntimeError):
                return

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield readings
    finally:
        stop.set()
        thread.join(5)
