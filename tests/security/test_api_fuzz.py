"""Property-based fuzz of the HTTP API with hostile input: odd ids in paths and headers, lone
surrogates, catastrophic-backtracking patterns, budgets past every ceiling, bodies that are not
JSON or are too large, unknown class methods. Never a 5xx, never a hang; a rejected request
writes nothing (the Firestore collections are compared before and after each one)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.envelopes import ODD_IDS
from tests.security.figures import FIGURES
from tests.security.probes import Probe, changed, documents, failures, send, under
from tests.support.stack import RunningStack

pytestmark = [pytest.mark.emulator, pytest.mark.slow, pytest.mark.timeout(300)]

EXAMPLES = 70
EVIL_SCHEMAS: list[Any] = [
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?:.|.){28}X"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a+)+\\1$"}}},
    {"type": "object", "patternProperties": {"^(a+)+$": {"type": "string"}}},
    {"type": "object", "properties": {"\ud800": {"type": "string"}}},
    {"type": "object", "properties": {"a": {"type": "string", "pattern": "\ud800"}}},
    {"type": "array"}, {"type": "object", "properties": {"a": {"$ref": "#/x/y"}}},
    "not a schema", None,
]
TEXTS: list[Any] = ["what is my ip address?", "", "   ", "\ud800", "\x00", "x" * 40_000, 5, None,
                    ["list"], {"a": 1}]
HEADER_IDS = ["ok-key-1", "a/b", "..", "__x__", "x" * 300, "%2F", "a b"]


def ident() -> st.SearchStrategy[str]:
    return st.sampled_from(["run-0000000000000000000000000000dead", *ODD_IDS])


def in_path(value: str) -> str:
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@st.composite
def run_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"text": draw(st.sampled_from(TEXTS))}
    if draw(st.booleans()):
        body["options"] = draw(st.one_of(
            st.fixed_dictionaries({"output_schema": st.sampled_from(EVIL_SCHEMAS)}),
            st.fixed_dictionaries({
                "max_steps": st.sampled_from([0, -1, 1001, 10**9, "5", 1.5]),
                "max_seconds": st.sampled_from([0, -1, 10**9, float("inf")]),
                "max_tool_calls": st.sampled_from([-1, 10_001, 10**12]),
            }),
            st.just("options"),
        ))
    for field in ("request_id", "conversation_id", "agent"):
        if draw(st.integers(0, 3)) == 0:
            body[field] = draw(st.one_of(ident(), st.sampled_from(["nobody", "reference-long"])))
    if draw(st.integers(0, 5)) == 0:
        body["extra"] = True
    return body


@st.composite
def api_request(draw: st.DrawFn) -> Probe:
    kind = draw(st.integers(0, 7))
    headers: list[tuple[str, str]] = [("content-type", "application/json")]
    if kind <= 2:
        body = json.dumps(draw(run_body())).encode()
        if draw(st.booleans()):
            headers.append(("idempotency-key", draw(st.sampled_from(HEADER_IDS))))
        if draw(st.integers(0, 4)) == 0:
            headers[0] = ("content-type", draw(st.sampled_from(["text/plain", "", "a/b; x"])))
        return Probe("api", "POST", "/runs", body, tuple(headers), label="create run", api=True)
    if kind == 3:
        body = draw(st.one_of(st.binary(max_size=100), st.sampled_from(
            [b"{", b"null", b"[]", b'{"text": "\\udfff"}', b"\xff\xfe", b"{" * 10_000,
             b'{"text": "' + b"a" * 300_000 + b'"}'])))
        path = draw(st.sampled_from(["/runs", "/api/reasoning_engine",
                                     "/api/stream_reasoning_engine", "/sweep", "/schedules",
                                     "/schedules/s/backfill"]))
        return Probe("api", "POST", path, body, tuple(headers), label="raw body", api=True)
    if kind == 4:
        run = in_path(draw(ident()))
        path = draw(st.sampled_from([f"/runs/{run}", f"/runs/{run}/events",
                                     f"/runs/{run}/events?after=..%2F..",
                                     f"/conversations/{run}/runs", f"/schedules/{run}"]))
        return Probe("api", "GET", path, label="read", api=True)
    if kind == 5:
        run = in_path(draw(ident()))
        return Probe("api", "POST", f"/runs/{run}/cancel", label="cancel", api=True)
    method = draw(st.sampled_from(["query", "get_run", "cancel_run", "stream_query", "nope",
                                   "__init__", ""]))
    payload = {"class_method": method, "input": draw(st.one_of(
        st.fixed_dictionaries({"message": st.sampled_from(TEXTS),
                               "wait_seconds": st.sampled_from([0, 1, -1, 10**9])}),
        st.fixed_dictionaries({"run_id": ident()}),
        st.sampled_from([None, [], "input"]),
    ))}
    path = "/api/stream_reasoning_engine" if method == "stream_query" else \
        "/api/reasoning_engine"
    return Probe("api", "POST", path, json.dumps(payload).encode(), tuple(headers),
                 label=f"class_method {method!r}", api=True)


def test_hostile_api_requests(security_stack: RunningStack) -> None:
    stack = security_stack
    problems: list[str] = []
    statuses: list[int] = []

    @given(probe=api_request())
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    def fuzz(probe: Probe) -> None:
        before = documents(stack)
        (answer,) = send(stack, [probe])
        problems.extend(failures([answer]))
        if answer.status is None:
            return
        statuses.append(answer.status)
        if answer.status < 400:
            return
        runs = {p.split("/")[1] for p in before if p.startswith(
            f"{stack.settings.collection_prefix}runs/")}
        # A run that started its own conversation (its id is the run's) writes that
        # conversation's transcript before the conversation has a document of its own.
        conversations = runs | {p.split("/")[1] for p in before if p.startswith(
            f"{stack.settings.collection_prefix}conversations/")}
        written = sorted(p for p in changed(before, documents(stack))
                         if not under(stack, p, runs, conversations))
        if written:
            FIGURES.rejected_writes += len(written)
            FIGURES.sample(f"written by rejected {answer.describe()}: {written[:4]}")
            problems.append(f"rejected {answer.describe()} wrote {written[:8]}")

    fuzz()
    assert not problems, "\n".join(problems[:30])
    # It exercised the service: accepted requests and rejected ones.
    assert any(s < 300 for s in statuses) and any(400 <= s < 500 for s in statuses)
