"""A local server speaking the Gemini REST API, so tests run the real google-genai client.

In a test::

    with FakeGeminiServer(faults="429:3") as server:
        model = GeminiModel(api_key="test", base_url=server.url)
        ...
        assert server.stats()["requests"] == 2

As a process: ``python -m ackloop_dev.fakes.gemini_server --port 8090 [--faults SPEC]
[--fault-rate 0.1 --fault-kinds 500,429:1 --seed 7] [--policy seed|reference:TOOL]
[--stream-delay 0.05 --stream-chunk-chars 8] [--max-input-tokens N] [--cache-min-tokens N]``.
It prints ``fake Gemini server listening on URL`` and serves until SIGTERM or SIGINT.

Endpoints: ``POST /{version}/models/{model}:generateContent``;
``POST /{version}/models/{model}:streamGenerateContent?alt=sse`` (the same answer as Server-Sent
Events, its text split into chunks of ``stream_chunk_chars`` characters sent ``stream_delay``
seconds apart, as google-genai's ``generate_content_stream`` reads them); ``GET /`` (health);
``GET /_admin/stats`` (counters; ``in_flight`` and ``in_flight_max``: generate requests being
answered now, and the most at once since the last reset); ``GET /_admin/requests`` (every body
received); ``GET /_admin/chunks``
(each streamed chunk's text and when it was sent, Unix seconds); ``POST /_admin/faults``
with ``{"faults": SPEC, "fault_rate": P, "fault_kinds": SPEC, "seed": N}``; ``POST
/_admin/stream`` with ``{"delay": S, "chunk_chars": N}``; ``GET /_admin/limits`` and ``POST
/_admin/limits`` with ``{"max_input_tokens": N or null, "cache_min_tokens": N}`` (a key left out
keeps its value); ``GET /_admin/quota`` and ``POST /_admin/quota`` with
``{"requests_per_minute": N or null, "input_tokens_per_minute": N or null, "style":
"gemini-api"|"vertex", "rounding": "floor"|"ceil"}`` (the per-minute quota of
:mod:`ackloop_dev.fakes.gemini_quota`, off unless set; also ``--quota-rpm``, ``--quota-tpm``);
``POST /_admin/reset``.
Fault specs are described in :mod:`ackloop_dev.fakes.gemini_faults`. It binds to 127.0.0.1 only.

A function response's media parts are checked as Gemini checks them (one of inline data or
a ``gs://``/``https://`` file URI each, a MIME type Gemini reads there, unique display names,
each ``$ref`` naming one): a malformed one is a 400. :func:`media_report_script` answers what
they hold, read from their bytes, so a test can tell the model saw the very file.

A content's own file parts (:mod:`ackloop_dev.fakes.gemini_files`): an ``inlineData`` part
without a ``mimeType`` or whose ``data`` is not base64, or a ``fileData`` part without a
``fileUri`` or a ``mimeType``, is a 400 ``INVALID_ARGUMENT`` worded as Gemini's; a request that
ends with the user's question and its files is answered with what the files are, read from
their bytes (a PDF's pages and text, an image's format and size), whatever the policy.

Two behaviours of the real API, with token counts as ``usageMetadata.promptTokenCount`` counts
them (:func:`ackloop.model.turns.estimate_usage` over system instruction, contents and tools):

- **Input limit.** With ``max_input_tokens`` set, a request counting more prompt tokens is
  answered as Gemini answers it: 400 ``INVALID_ARGUMENT``, "The input token count (N) exceeds the
  maximum number of tokens allowed (M)." It is logged and counted like a fault
  (``faults_served["input-limit"]``); a scheduled fault still comes first.
- **Implicit caching.** Every answered request's prefixes are remembered per model (system
  instruction and tools, then each content in order; digests of their canonical JSON, the
  ``cache_entries`` least recently used kept). A later request whose longest remembered prefix
  counts at least ``cache_min_tokens`` tokens gets ``usageMetadata.cachedContentTokenCount`` =
  that count (part of ``promptTokenCount``, as in Gemini); below the minimum the field is absent.
  The default minimum, 1024, is the one ai.google.dev/gemini-api/docs/caching lists for Gemini
  2.5 Flash and 3 Flash Preview (2.5 Pro and 3 Pro Preview: 4096; some later copies of the page
  list 2048 for 2.5 Flash and Pro, and 4096 for newer Flash models).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import threading
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any

from ackloop.domain.errors import ModelPermanentError, ModelRetryableError
from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.scripted import Script, ScriptedModel, reference_workload_script
from ackloop.model.turns import calls_turn, text_turn
from ackloop_dev.fakes.gemini_faults import Fault, FaultPlan, parse_fault_spec
from ackloop_dev.fakes.gemini_files import file_answer, invalid_part
from ackloop_dev.fakes.gemini_quota import QUOTA, QuotaWindow, Refusal, quota_error
from ackloop_dev.fakes.gemini_rest import (
    error_body,
    function_response_media,
    prefix_digests,
    prompt_tokens,
    request_from_rest,
    response_to_rest,
    retry_info,
    stream_chunks,
    too_many_tokens_message,
)

HOST = "127.0.0.1"
INPUT_LIMIT = "input-limit"
"""The kind a request above ``max_input_tokens`` is counted under in ``faults_served``."""
CACHE_MIN_TOKENS = 1024
"""Implicit caching's documented minimum prompt for Gemini 2.5 Flash and 3 Flash Preview."""
_GENERATE = re.compile(r"^/[^/]+/(?:.*/)?models/([^/:]+):(generateContent|streamGenerateContent)$")


@dataclass(frozen=True)
class RecordedRequest:
    """One ``generateContent`` call as received: the model named in the path and the JSON body;
    its prompt token count when the body parses."""

    model: str
    body: JsonDict
    headers: dict[str, str]
    prompt_tokens: int | None = None


class PrefixCache:
    """Digests of the prefixes of recent requests (:func:`prefix_digests`), per model, the
    ``entries`` least recently seen forgotten first. Thread-safe."""

    def __init__(self, entries: int) -> None:
        if entries < 0:
            raise ValueError("cache entries must be >= 0")
        self.entries = entries
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, bytes], None] = OrderedDict()

    def match(self, model: str, digests: list[bytes]) -> int:
        """How many of the leading pieces the longest remembered prefix holds (0: none); then
        remember every prefix of this request."""
        with self._lock:
            found = next((n for n in range(len(digests), 0, -1)
                          if (model, digests[n - 1]) in self._seen), 0)
            for digest in digests:
                self._seen[(model, digest)] = None
                self._seen.move_to_end((model, digest))
            while len(self._seen) > self.entries:
                self._seen.popitem(last=False)
        return found

    def clear(self) -> None:
        with self._lock:
            self._seen.clear()


class FakeGeminiServer:
    """The server's state and lifecycle; the HTTP handling is in :class:`_Handler`.

    ``policy`` decides each answer from the request (default: the scripted seed agent). A policy
    raising ``ModelPermanentError`` is answered with 400, ``ModelRetryableError`` with 503.
    ``max_input_tokens`` (None: no limit), ``cache_min_tokens`` and ``cache_entries`` (0: no
    implicit caching) are described in the module's docstring.
    """

    def __init__(
        self,
        policy: Script | None = None,
        *,
        port: int = 0,
        faults: str = "",
        fault_rate: float = 0.0,
        fault_kinds: str = "",
        seed: int = 0,
        keep_requests: int = 10_000,
        stream_delay: float = 0.0,
        stream_chunk_chars: int = 8,
        max_input_tokens: int | None = None,
        cache_min_tokens: int = CACHE_MIN_TOKENS,
        cache_entries: int = 100_000,
        quota: QuotaWindow | None = None,
    ) -> None:
        self.policy: Script = policy or ScriptedModel().decide
        self.configure_stream(stream_delay, stream_chunk_chars)
        self.max_input_tokens: int | None = None
        self.cache_min_tokens = CACHE_MIN_TOKENS
        self.configure_limits({"max_input_tokens": max_input_tokens,
                               "cache_min_tokens": cache_min_tokens})
        self.prefixes = PrefixCache(cache_entries)
        self.quota = quota or QuotaWindow()  # no limit unless configured
        # (when, text) of each streamed chunk: what a test times the client's deltas against.
        self.chunks_sent: deque[tuple[float, str]] = deque(maxlen=keep_requests)
        self.faults = FaultPlan()
        self.faults.schedule(parse_fault_spec(faults))
        self.faults.set_random(fault_rate, parse_fault_spec(fault_kinds), seed)
        self._lock = threading.Lock()
        # Bounded: a benchmark can send far more requests than anyone will inspect.
        self._requests: deque[RecordedRequest] = deque(maxlen=keep_requests)
        self._received = 0
        self._served: Counter[str] = Counter()
        self._models: Counter[str] = Counter()
        self._in_flight = 0
        self._in_flight_max = 0
        self._closing = threading.Event()
        self._http = ThreadingHTTPServer((HOST, port), _Handler, bind_and_activate=False)
        self._http.daemon_threads = True  # a handler sleeping in a delay fault must not block exit
        self._http.request_queue_size = 256
        self._http.fake = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Base URL for ``HttpOptions(base_url=...)``."""
        return f"http://{HOST}:{self._http.server_address[1]}"

    def start(self) -> FakeGeminiServer:
        """Bind and serve in a background thread."""
        self._http.server_bind()
        self._http.server_activate()
        # A short poll interval keeps stop() fast: tests start and stop many servers.
        self._thread = threading.Thread(
            target=self._http.serve_forever, args=(0.02,), name="fake-gemini", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port (waits for no in-flight delay)."""
        self._closing.set()
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join()
        self._http.server_close()

    def __enter__(self) -> FakeGeminiServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def requests(self) -> list[RecordedRequest]:
        """The last ``keep_requests`` ``generateContent`` requests, in arrival order."""
        with self._lock:
            return list(self._requests)

    def stats(self) -> JsonDict:
        """Counters: ``requests``, ``answered``, ``faults_served``, ``faults_pending``, ``models``.

        A delayed answer counts both as answered and under ``faults_served["delay"]``.
        """
        with self._lock:
            faults = {k: v for k, v in self._served.items() if k != "answered"}
            return {
                "requests": self._received,
                "answered": self._served["answered"],
                "faults_served": faults,
                "faults_pending": self.faults.pending(),
                "models": dict(self._models),
                "quota": self.quota.stats(),
                "in_flight": self._in_flight,
                "in_flight_max": self._in_flight_max,
            }

    @contextlib.contextmanager
    def answering(self) -> Iterator[None]:
        """Count a generate request as in flight while it is being answered (``in_flight``,
        and the most at once since the last reset, ``in_flight_max``)."""
        with self._lock:
            self._in_flight += 1
            self._in_flight_max = max(self._in_flight_max, self._in_flight)
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def reset(self) -> None:
        """Forget recorded requests, counters, faults and remembered prefixes (not the limits)."""
        with self._lock:
            self._requests.clear()
            self.chunks_sent.clear()
            self._served.clear()
            self._models.clear()
            self._received = 0
            self._in_flight_max = self._in_flight
        self.faults.clear()
        self.prefixes.clear()
        self.quota.reset()

    def configure_faults(self, settings: JsonDict) -> None:
        """Apply an admin body: ``faults`` is appended; ``fault_rate`` replaces the random mode."""
        self.faults.schedule(parse_fault_spec(str(settings.get("faults", ""))))
        if "fault_rate" in settings:
            kinds = parse_fault_spec(str(settings.get("fault_kinds", "")))
            self.faults.set_random(
                float(settings["fault_rate"]), kinds, int(settings.get("seed", 0))
            )

    def configure_stream(self, delay: float, chunk_chars: int) -> None:
        """Seconds between streamed chunks, and the characters of text in each."""
        if delay < 0 or chunk_chars < 1:
            raise ValueError("stream delay must be >= 0 and chunk_chars >= 1")
        self.stream_delay, self.stream_chunk_chars = delay, chunk_chars

    def configure_limits(self, settings: JsonDict) -> JsonDict:
        """Apply an admin body: ``max_input_tokens`` (an int >= 1, or None for no limit) and
        ``cache_min_tokens`` (an int >= 0); a key left out keeps its value. Returns both."""
        limit = settings.get("max_input_tokens", self.max_input_tokens)
        minimum = settings.get("cache_min_tokens", self.cache_min_tokens)
        if limit is not None and (not _is_int(limit) or limit < 1):
            raise ValueError("max_input_tokens must be an integer >= 1, or null")
        if not _is_int(minimum) or minimum < 0:
            raise ValueError("cache_min_tokens must be an integer >= 0")
        self.max_input_tokens, self.cache_min_tokens = limit, minimum
        return self.limits()

    def limits(self) -> JsonDict:
        """``max_input_tokens`` and ``cache_min_tokens``, as ``/_admin/limits`` shows them."""
        return {"max_input_tokens": self.max_input_tokens,
                "cache_min_tokens": self.cache_min_tokens}

    def cached_tokens(self, model: str, body: JsonDict, request: ModelRequest) -> int:
        """The prompt tokens of ``request`` an implicit cache would serve (0: none), given the
        prefixes remembered for ``model``; then remember this request's."""
        if self.prefixes.entries == 0:
            return 0
        pieces = self.prefixes.match(model, prefix_digests(body))
        if pieces == 0:
            return 0
        prefix = request.model_copy(update={"contents": request.contents[:pieces - 1]})
        tokens = prompt_tokens(prefix)
        return tokens if tokens >= self.cache_min_tokens else 0

    def record(self, request: RecordedRequest) -> Fault | Refusal | None:
        """Count ``request`` and pick its fault (None: answer normally). A request counting more
        prompt tokens than ``max_input_tokens`` gets ``Fault(INPUT_LIMIT, limit)`` unless a fault
        other than a delay was due; then one the quota refuses gets its :class:`Refusal`."""
        fault = self.faults.next()
        limit, tokens = self.max_input_tokens, request.prompt_tokens
        if ((fault is None or fault.kind == "delay") and limit is not None and tokens is not None
                and tokens > limit):
            fault = Fault(INPUT_LIMIT, float(limit))
        outcome: Fault | Refusal | None = fault
        if (fault is None or fault.kind == "delay") and self.quota.enabled:
            outcome = self.quota.admit(tokens or 0) or fault
        delayed = isinstance(outcome, Fault) and outcome.kind == "delay"
        with self._lock:
            self._requests.append(request)
            self._received += 1
            self._models[request.model] += 1
            self._served[QUOTA if isinstance(outcome, Refusal) else "answered"
                         if outcome is None or delayed else outcome.kind] += 1
            if delayed:
                self._served["delay"] += 1
        return outcome

    def wait(self, seconds: float) -> None:
        """Sleep for a delay fault, cut short when the server stops."""
        self._closing.wait(seconds)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as google-genai's pooled client expects

    @property
    def fake(self) -> FakeGeminiServer:
        return self.server.fake  # type: ignore[attr-defined,no-any-return]

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests and benchmarks send thousands of requests."""

    def do_GET(self) -> None:
        if self.path == "/":
            self._json(200, {"status": "ok"})
        elif self.path == "/_admin/stats":
            self._json(200, self.fake.stats())
        elif self.path == "/_admin/requests":
            self._json(200, {"requests": [r.body for r in self.fake.requests]})
        elif self.path == "/_admin/limits":
            self._json(200, self.fake.limits())
        elif self.path == "/_admin/quota":
            self._json(200, self.fake.quota.stats())
        elif self.path == "/_admin/chunks":
            self._json(200, {"chunks": [{"at": at, "text": text}
                                        for at, text in list(self.fake.chunks_sent)]})
        else:
            self._json(404, error_body(404, f"no such path {self.path}"))

    def do_POST(self) -> None:
        body = self._read_json()
        if body is None:
            self._json(400, error_body(400, "request body is not a JSON object"))
        elif self.path == "/_admin/faults":
            try:
                self.fake.configure_faults(body)
            except ValueError as error:
                self._json(400, error_body(400, str(error)))
                return
            self._json(200, self.fake.stats())
        elif self.path == "/_admin/stream":
            try:
                self.fake.configure_stream(float(body.get("delay", self.fake.stream_delay)),
                                           int(body.get("chunk_chars",
                                                        self.fake.stream_chunk_chars)))
            except (TypeError, ValueError) as error:
                self._json(400, error_body(400, str(error)))
                return
            self._json(200, {"delay": self.fake.stream_delay,
                             "chunk_chars": self.fake.stream_chunk_chars})
        elif self.path == "/_admin/limits":
            try:
                limits = self.fake.configure_limits(body)
            except ValueError as error:
                self._json(400, error_body(400, str(error)))
                return
            self._json(200, limits)
        elif self.path == "/_admin/quota":
            try:
                self.fake.quota.configure(body)
            except ValueError as error:
                self._json(400, error_body(400, str(error)))
                return
            self._json(200, self.fake.quota.stats())
        elif self.path == "/_admin/reset":
            self.fake.reset()
            self._json(200, self.fake.stats())
        elif match := _GENERATE.match(self.path.split("?", 1)[0]):
            with self.fake.answering():
                self._generate(match.group(1), body,
                               streamed=match.group(2) != "generateContent")
        else:
            self._json(404, error_body(404, f"no such path {self.path}"))

    def _generate(self, model: str, body: JsonDict, *, streamed: bool = False) -> None:
        request: ModelRequest | None = None
        invalid = ""
        try:
            if problem := invalid_part(body):  # a content's file part Gemini refuses
                raise ValueError(problem)
            request = request_from_rest(model, body)
            function_response_media(request.contents)  # a function response's media parts
        except ValueError as error:  # the body does not fit the Gemini schema
            request = None
            invalid = (str(error) if str(error) == invalid_part(body)
                       else f"invalid generateContent body: {error}")
        tokens = prompt_tokens(request) if request is not None else None
        fault = self.fake.record(
            RecordedRequest(model, body, dict(self.headers.items()), tokens))
        if isinstance(fault, Refusal):  # over the quota: nothing of it is served
            self._json(429, quota_error(self.fake.quota, fault, model))
            return
        if fault is not None and fault.kind == INPUT_LIMIT:  # before any stream starts
            message = too_many_tokens_message(tokens or 0, int(fault.value or 0))
            self._json(400, error_body(400, message))
            return
        if fault is not None and fault.kind not in ("delay", "midstream"):
            self._serve_fault(fault, streamed)
            return
        if fault is not None and fault.kind == "midstream" and not streamed:
            self._json(503, error_body(503, "injected fault 503"))
            return
        if fault is not None and fault.kind == "delay":  # midstream's value is a chunk count
            self.fake.wait(fault.value or 0.0)
        if request is None:
            self._json(400, error_body(400, invalid))
            return
        try:
            about_files = file_answer(body)  # the user's question about its files
            turn = (text_turn(about_files, request=request) if about_files is not None
                    else self.fake.policy(request))
        except ModelPermanentError as error:
            self._json(400, error_body(400, str(error)))
        except ModelRetryableError as error:
            self._json(503, error_body(503, str(error)))
        except ValueError as error:
            self._json(400, error_body(400, f"invalid generateContent body: {error}"))
        else:
            cached = self.fake.cached_tokens(model, body, request)
            if not streamed:
                self._json(200, response_to_rest(turn, model, cached_tokens=cached))
                return
            cut = int(fault.value or 0) if fault is not None and fault.kind == "midstream" else None
            self._stream(stream_chunks(turn, model, self.fake.stream_chunk_chars,
                                       cached_tokens=cached), cut)

    def _stream(self, chunks: list[JsonDict], cut: int | None) -> None:
        """Server-Sent Events, one ``data:`` line per chunk, ``stream_delay`` apart; with
        ``cut``, a 503 error event after that many chunks ends the stream instead. The body is
        delimited by the connection's end, so nothing is left to read on a kept-alive socket."""
        try:
            self._start_stream()
            for n, chunk in enumerate(chunks):
                if n == cut:
                    self._event(error_body(503, "injected fault 503 in the stream"))
                    return
                if n:
                    self.fake.wait(self.fake.stream_delay)
                self._event(chunk)
                text = "".join(str(p.get("text", "")) for c in chunk.get("candidates", [])
                               for p in (c.get("content") or {}).get("parts", []))
                self.fake.chunks_sent.append((time.time(), text))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up

    def _stream_raw(self, events: list[bytes]) -> None:
        try:
            self._start_stream()
            for data in events:
                self.wfile.write(b"data: " + data + b"\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _start_stream(self) -> None:
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()

    def _event(self, body: JsonDict) -> None:
        self.wfile.write(b"data: " + json.dumps(body).encode() + b"\r\n\r\n")
        self.wfile.flush()

    def _serve_fault(self, fault: Fault, streamed: bool) -> None:
        answers: dict[str, JsonDict] = {
            "safety": {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "fake"},
            "safety-finish": {"candidates": [{"finishReason": "SAFETY", "index": 0}]},
            "empty": {"candidates": []},
            "no-content": {"candidates": [{"finishReason": "STOP", "index": 0}]},
        }
        if fault.kind == "malformed":
            raw = b'{"candidates": [ this is not json'
            if streamed:  # a stream's one event that does not parse
                self._stream_raw([raw])
            else:
                self._send(200, raw, "application/json")
        elif fault.kind in answers:
            if streamed:  # a stream of that one chunk
                self._stream_raw([json.dumps(answers[fault.kind]).encode()])
            else:
                self._json(200, answers[fault.kind])
        elif fault.kind == "429-details":
            details = [retry_info(fault.value)] if fault.value is not None else None
            self._json(429, error_body(429, "Resource exhausted (injected)", details))
        else:
            status = fault.status or 500
            headers: dict[str, str] = {}
            details = None
            if status == 429 and fault.value is not None:
                headers["Retry-After"] = f"{fault.value:g}"
                details = [retry_info(fault.value)]
            self._json(status, error_body(status, f"injected fault {status}", details), headers)

    def _read_json(self) -> JsonDict | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    def _json(self, status: int, body: JsonDict, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(body).encode(), "application/json; charset=UTF-8", headers)

    def _send(
        self, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (its timeout fired during a delay fault): nobody to answer.
            self.close_connection = True


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def media_report_script(tool: str, args: JsonDict | None = None) -> Script:
    """A policy that calls ``tool`` (with ``args``) once, then answers what the media parts of
    the function responses it received hold, read from their bytes
    (:func:`~ackloop_dev.fakes.gemini_rest.function_response_media`): ``saw chart.png:
    image/png, PNG 64x32, 1234 bytes, sha256 <hex>`` (one such clause per part, ``; ``
    between them), or ``saw no media``."""

    def decide(request: ModelRequest) -> ModelTurn:
        last = request.contents[-1] if request.contents else {}
        if not any("function_response" in part for part in last.get("parts") or []):
            return calls_turn([(tool, dict(args or {}))], request=request)
        seen = function_response_media([last])
        clauses = [
            f"{m['display_name']}: {m['mime_type']}"
            + (f", {m['image']}" if m.get("image") else "")
            + (f", {m['bytes']} bytes, sha256 {m['sha256']}" if "bytes" in m
               else f", file {m.get('file_uri')}")
            for m in seen
        ]
        return text_turn("saw " + "; ".join(clauses) if clauses else "saw no media",
                         request=request)

    return decide


def _policy_from_name(name: str) -> Script:
    if name == "seed":
        return ScriptedModel().decide
    if name == "catalog":
        # Every agent of the catalog the environment names, each with its own script (imported
        # late: it pulls in the agents' tools).
        from ackloop.agents.scripts import deployment_script
        from ackloop.config.settings import Settings
        from ackloop_dev.agents import with_catalog

        return ScriptedModel(deployment_script(with_catalog(Settings()))).decide
    kind, _, tool = name.partition(":")
    if kind == "reference" and tool:
        return reference_workload_script(tool)
    raise ValueError(f"unknown policy {name!r} (use 'seed', 'catalog' or 'reference:TOOL')")


def server_from_args(argv: list[str] | None = None) -> FakeGeminiServer:
    """The server the command line describes (not started)."""
    parser = argparse.ArgumentParser(description="Local fake of the Gemini generateContent API.")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--faults", default="", help="scheduled faults, e.g. '429:2,500*2,ok'")
    parser.add_argument("--fault-rate", type=float, default=0.0, help="probability of a fault")
    parser.add_argument("--fault-kinds", default="500", help="faults drawn at --fault-rate")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random faults")
    parser.add_argument("--stream-delay", type=float, default=0.0,
                        help="seconds between the chunks of a streamed answer")
    parser.add_argument("--stream-chunk-chars", type=int, default=8,
                        help="characters of text in each chunk of a streamed answer")
    parser.add_argument("--max-input-tokens", type=int, default=None,
                        help="answer requests counting more prompt tokens with Gemini's 400")
    parser.add_argument("--cache-min-tokens", type=int, default=CACHE_MIN_TOKENS,
                        help="smallest repeated prefix reported as cachedContentTokenCount")
    parser.add_argument("--quota-rpm", type=int, default=None,
                        help="requests a minute, as a Gemini quota enforces them (429)")
    parser.add_argument("--quota-tpm", type=int, default=None,
                        help="input tokens a minute, as a Gemini quota enforces them (429)")
    parser.add_argument("--quota-style", default="gemini-api", choices=["gemini-api", "vertex"],
                        help="the 429's body: the Gemini API's (with RetryInfo) or Vertex's")
    parser.add_argument("--quota-rounding", default="floor", choices=["floor", "ceil"],
                        help="how retryDelay rounds the wait: floor as Gemini ('0s'), or ceil")
    parser.add_argument(
        "--policy", default="seed",
        help="'seed', 'catalog' (every agent of ACKLOOP_AGENTS, else the built-in ones) or "
        "'reference:TOOL'",
    )
    args = parser.parse_args(argv)
    return FakeGeminiServer(
        _policy_from_name(args.policy),
        port=args.port,
        faults=args.faults,
        fault_rate=args.fault_rate,
        fault_kinds=args.fault_kinds,
        seed=args.seed,
        stream_delay=args.stream_delay,
        stream_chunk_chars=args.stream_chunk_chars,
        max_input_tokens=args.max_input_tokens,
        cache_min_tokens=args.cache_min_tokens,
        quota=QuotaWindow(args.quota_rpm, args.quota_tpm, style=args.quota_style,
                          rounding=args.quota_rounding),
    )


def main(argv: list[str] | None = None) -> None:
    """Run the fake server as a process until SIGTERM or SIGINT."""
    server = server_from_args(argv)
    stopping = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    server.start()
    print(f"fake Gemini server listening on {server.url}", flush=True)
    stopping.wait()
    server.stop()


if __name__ == "__main__":
    main()
