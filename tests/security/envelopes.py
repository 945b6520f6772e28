"""Hypothesis strategies for hostile push envelopes: forged step messages for real runs (wrong
index, turn, call, name, args or usage; future turns; forged dead letters; attributes that
disagree with the body) and malformed envelopes (odd or huge messageIds, list attributes,
numeric data, bad base64, lone surrogates, bodies that are not envelopes)."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from tests.security.probes import Probe

TOOL_NAMES = ("get_ip_address", "get_location_info", "get_weather_alerts", "bench_lookup",
              "no_such_tool", "../steps", "")
NESTED: Any = 1
for _ in range(24):
    NESTED = [NESTED]  # deeper than Firestore's 20 levels
FORGED_ARGS = ({}, {"ipaddress": "203.0.113.7"}, {"state": "CA"}, {"key": "k"},
               {"ipaddress": "\ud800"}, {"x": NESTED})
ODD_IDS = ("a/b/c", "__reserved__", ".", "..", "x" * 1600, "é", "\ud800", " ", "runs", "%2F")
BIG = (9_999, 10_000, 1_000, 2**31, 2**63, -1)


@dataclass(frozen=True)
class Target:
    """A run the forged messages name, with what its ledger really asked for."""

    run_id: str
    turns: tuple[tuple[tuple[str, dict[str, Any]], ...], ...] = ()
    """Per completed model turn, the calls (name, args) it committed."""
    live: bool = False
    request_id: str = ""
    notes: dict[str, str] = field(default_factory=dict)


def usage() -> st.SearchStrategy[dict[str, int]]:
    number = st.one_of(st.integers(-(2**40), 2**40), st.sampled_from([-1, 0, 2**62]))
    return st.fixed_dictionaries({
        "model_calls": number, "tool_calls": number, "prompt_tokens": number,
        "output_tokens": number, "total_tokens": number,
    })


@st.composite
def tool_message(draw: st.DrawFn, target: Target) -> dict[str, Any]:
    turns = target.turns
    turn = draw(st.one_of(st.integers(0, max(0, len(turns) - 1)),
                          st.integers(len(turns), len(turns) + 2), st.sampled_from(BIG)))
    real = turns[turn] if 0 <= turn < len(turns) else ()
    index = draw(st.one_of(st.integers(0, len(real) + 1), st.sampled_from(BIG)))
    name, args = real[index] if 0 <= index < len(real) else ("get_ip_address", {})
    if draw(st.booleans()):
        name = draw(st.sampled_from(TOOL_NAMES))
    if draw(st.booleans()):
        args = draw(st.sampled_from(FORGED_ARGS))
    return {
        "v": 1, "kind": "tool", "run_id": target.run_id, "turn": turn, "index": index,
        "call_count": draw(st.one_of(st.just(max(1, len(real))), st.integers(1, 4),
                                     st.sampled_from(BIG))),
        "call": {"name": name, "args": args, "id": draw(st.none() | st.text(max_size=8))},
        "agent": draw(st.sampled_from(["default", "reference", "reference-long", "nobody"])),
        "usage": draw(usage()),
    }


@st.composite
def model_message(draw: st.DrawFn, target: Target) -> dict[str, Any]:
    last = len(target.turns)
    turn = draw(st.one_of(st.integers(0, last + 3), st.sampled_from(BIG)))
    return {"v": 1, "kind": "model", "run_id": target.run_id, "turn": turn,
            "usage": draw(usage())}


@st.composite
def query_message(draw: st.DrawFn, target: Target) -> dict[str, Any]:
    """Queries that must be refused (nothing about them is valid), or a replay of a real
    query (same request id: the run exists, nothing new)."""
    if target.request_id and draw(st.booleans()):
        return {"v": 1, "request_id": target.request_id, "text": "replayed"}
    return {"v": draw(st.sampled_from([1, 2, "1"])),
            "request_id": draw(st.sampled_from(ODD_IDS)),
            "text": draw(st.sampled_from(["", "   ", "\ud800", "x" * 40_000])),
            "options": {"max_steps": draw(st.sampled_from([0, -5, 10**9]))}}


def step_message(targets: list[Target]) -> st.SearchStrategy[dict[str, Any]]:
    target = st.sampled_from(targets)
    return target.flatmap(lambda t: st.one_of(tool_message(t), model_message(t),
                                              query_message(t)))


@st.composite
def mutated(draw: st.DrawFn, message: dict[str, Any]) -> dict[str, Any]:
    """Sometimes drop a field, add one, or change a type."""
    choice = draw(st.integers(0, 5))
    out = dict(message)
    if choice == 0 and out:
        out.pop(draw(st.sampled_from(sorted(out))))
    elif choice == 1:
        out["extra"] = "field"
    elif choice == 2 and "turn" in out:
        out["turn"] = draw(st.sampled_from(["1", 1.5, None, [1], True]))
    return out


def attributes(targets: list[Target]) -> st.SearchStrategy[Any]:
    run_ids = [t.run_id for t in targets]
    return st.one_of(
        st.just({}),
        st.fixed_dictionaries({"run_id": st.sampled_from(run_ids)}),
        st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=4),
        st.just(["run_id", run_ids[0]]),
        st.just({"run_id": 5, "n": None, "l": [1]}),
        st.just({"CloudPubSubDeadLetterSourceSubscription": "projects/p/subscriptions/x",
                 "CloudPubSubDeadLetterSourceDeliveryCount": "10"}),
    )


def message_ids() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.builds(lambda: f"sec-{uuid.uuid4().hex}"),
        st.sampled_from(ODD_IDS),
        st.text(min_size=1, max_size=30),
        st.sampled_from([0, 12345, None, ["a"], {"a": 1}, True]),
    )


def data_field(message: dict[str, Any]) -> st.SearchStrategy[Any]:
    encoded = base64.b64encode(json.dumps(message).encode()).decode()
    return st.one_of(
        st.just(encoded), st.just(encoded), st.just(encoded),
        st.just(encoded[:-3] + "!!!"), st.just("not base64 at all ~~~"),
        st.sampled_from([12345, None, [encoded], {"b64": encoded}, ""]),
        st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()),
    )


@st.composite
def envelope(draw: st.DrawFn, targets: list[Target]) -> Probe:
    """One POST to a push function."""
    service = draw(st.sampled_from(["ingest", "model_step", "tool_step", "dead_letter"]))
    shape = draw(st.integers(0, 9))
    if shape == 0:  # not an envelope at all
        body = draw(st.one_of(
            st.binary(max_size=200),
            st.sampled_from([b"null", b"[]", b"{}", b'{"message": "x"}', b'{"message": []}',
                             b'{"message": {"messageId": "\\ud800", "data": "e30="}}',
                             b"\xff\xfe{", b'{"specversion": "1.0", "data": {"message": 1}}']),
        ))
        return Probe(service, "POST", "/", body, (("content-type", "application/json"),),
                     label="not an envelope")
    message = draw(mutated(draw(step_message(targets))))
    message_id = draw(message_ids()) if shape in (1, 2) else f"sec-{uuid.uuid4().hex}"
    attrs = draw(attributes(targets)) if shape in (2, 3, 4) else {}
    if service == "dead_letter" and isinstance(attrs, dict) and draw(st.booleans()):
        attrs = {**attrs, "CloudPubSubDeadLetterSourceSubscription": "projects/p/subscriptions/s",
                 "CloudPubSubDeadLetterSourceDeliveryCount": "10"}
    data = draw(data_field(message)) if shape in (3, 5) else \
        base64.b64encode(json.dumps(message).encode()).decode()
    body: dict[str, Any] = {
        "message": {"data": data, "attributes": attrs, "messageId": message_id,
                    "publishTime": "2026-01-01T00:00:00Z"},
        "subscription": draw(st.sampled_from(["projects/p/subscriptions/s", 7, None])),
    }
    if shape in (6, 7):
        body["deliveryAttempt"] = draw(st.sampled_from([1, 10, 0, -1, 2**63, "3", None]))
    call = message.get("call")
    name = call.get("name") if isinstance(call, dict) else None
    label = ascii(f"{message.get('kind', 'query')} run={str(message.get('run_id'))[:24]} "
                  f"turn={message.get('turn')} index={message.get('index')} name={name}")
    return Probe(service, "POST", "/", json.dumps(body).encode(),
                 (("content-type", "application/json"),), label=label)
