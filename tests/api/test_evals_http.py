"""The evals API over real HTTP on 127.0.0.1: ``PUT /evals/{eval_id}``, ``GET /evals`` and
``GET /evals/{eval_id}``, each caller's reports their own (ID-token auth, tokens signed by a key
of the test's own), invalid bodies 422, the report's own body limit; and once through the api
process of a real stack on the emulators."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest

from ackloop.api.app import create_app
from ackloop.api.evals import MAX_REPORT_BYTES
from ackloop.config.settings import Settings
from ackloop.domain.eval_reports import EvalReport
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from tests.api.test_owners import signed_in
from tests.engine.fakes import CountingToolbox, make_loop
from tests.store.test_evals import case, report
from tests.support.stack import RunningStack


@dataclass
class Callers:
    alice: httpx.AsyncClient
    mallory: httpx.AsyncClient
    nobody: httpx.AsyncClient
    deps: Deps


@pytest.fixture
async def callers() -> AsyncIterator[Callers]:
    """Alice, Mallory and a caller without a token, on an engine with a memory store; the app
    takes bodies of 64 KiB."""
    deps = make_loop(ScriptedModel.from_turns([text_turn("hi")]), CountingToolbox()).deps
    settings = Settings(api_max_body_bytes=65_536)
    async with signed_in(settings, deps, "alice", "mallory") as (alice, mallory), \
            httpx.AsyncClient(base_url=str(alice.base_url), timeout=30) as nobody:
        yield Callers(alice, mallory, nobody, deps)


def body(sent: EvalReport) -> dict[str, object]:
    data: dict[str, object] = sent.model_dump(mode="json")
    return data


async def test_a_report_is_stored_read_and_listed_by_its_owner_alone(callers: Callers) -> None:
    sent = report("ev-weather", [case("paris"), case("lyon", passed=False)])
    stored = await callers.alice.put("/evals/ev-weather", json=body(sent))
    assert stored.status_code == 200, stored.text
    assert stored.json()["eval_id"] == "ev-weather" and "cases" not in stored.json()
    assert stored.json()["summary"] == sent.summary.model_dump(mode="json")

    read = await callers.alice.get("/evals/ev-weather")
    assert read.status_code == 200 and EvalReport.model_validate(read.json()) == sent
    listed = (await callers.alice.get("/evals")).json()
    assert [e["eval_id"] for e in listed["evals"]] == ["ev-weather"]
    assert listed["next"] is None and "cases" not in listed["evals"][0]
    # Stored as the caller's: the owner is the caller the token names.
    assert await callers.deps.store.evals.get_report("ev-weather", "google:alice") == sent

    # Another caller: not found, not listed, and the same id is a report of their own.
    assert (await callers.mallory.get("/evals/ev-weather")).status_code == 404
    assert (await callers.mallory.get("/evals")).json()["evals"] == []
    theirs = report("ev-weather", [case("rome")], name="mallory's")
    assert (await callers.mallory.put("/evals/ev-weather", json=body(theirs))).status_code == 200
    assert (await callers.mallory.get("/evals/ev-weather")).json()["name"] == "mallory's"
    assert EvalReport.model_validate((await callers.alice.get("/evals/ev-weather")).json()) == sent

    # Written again by its owner: replaced.
    again = report("ev-weather", [case("paris")], name="weather, again")
    assert (await callers.alice.put("/evals/ev-weather", json=body(again))).status_code == 200
    assert (await callers.alice.get("/evals/ev-weather")).json()["name"] == "weather, again"
    assert len((await callers.alice.get("/evals")).json()["evals"]) == 1

    missing = await callers.alice.get("/evals/ev-nothing")
    assert missing.status_code == 404
    assert missing.json() == {"error": "no eval ev-nothing", "code": "not_found"}


async def test_evals_are_listed_the_latest_first_a_page_at_a_time(callers: Callers) -> None:
    for i in range(3):
        sent = report(f"ev-{i}", [case("a")], started_at=1_700_000_000.0 + i)
        assert (await callers.alice.put(f"/evals/ev-{i}", json=body(sent))).status_code == 200
    page = (await callers.alice.get("/evals", params={"limit": 2})).json()
    assert [e["eval_id"] for e in page["evals"]] == ["ev-2", "ev-1"]
    rest = (await callers.alice.get("/evals", params={"limit": 2,
                                                       "before": page["next"]})).json()
    assert [e["eval_id"] for e in rest["evals"]] == ["ev-0"] and rest["next"] is None
    assert (await callers.alice.get("/evals", params={"limit": 0})).status_code == 422


async def test_bad_bodies_and_ids_are_422_naming_what_is_wrong(callers: Callers) -> None:
    good = body(report("ev-ok", [case("a")]))
    raw = {
        "another eval id": (json.dumps(good | {"eval_id": "ev-other"}), "body.eval_id"),
        "no name": (json.dumps({k: v for k, v in good.items() if k != "name"}), "body.name"),
        "a case without its name": (json.dumps(good | {"cases": [{"passed": True}]}),
                                    "body.cases.0.name"),
        "a check of an unknown kind": (json.dumps(good | {"cases": [
            {"name": "a", "checks": [{"name": "c", "kind": "vibe", "value": 1}]}]}),
            "body.cases.0.checks.0.kind"),
        "not an object": ("[1, 2]", "body"),
        "not JSON": ("{", "body"),
        "a lone surrogate in an answer": (json.dumps(good).replace(
            '"answer": "answer to a"', '"answer": {"k": "\\ud800"}'), "body.cases.0.answer.k"),
        "a number that is not finite": (json.dumps(good).replace(
            '"score": 1.0', '"score": NaN', 1), "score"),
    }
    for name, (text, field) in raw.items():
        answer = await callers.alice.put("/evals/ev-ok", content=text.encode(),
                                         headers={"Content-Type": "application/json"})
        assert answer.status_code == 422, (name, answer.text)
        assert answer.json()["code"] == "invalid_request", name
        fields = [f["field"] for f in answer.json().get("fields") or []]
        assert any(f.startswith(field) or f.endswith(field) for f in fields), (name, fields)
    bad_id = await callers.alice.put("/evals/..%2Fruns", json=good)
    assert bad_id.status_code in (404, 422), bad_id.text
    assert (await callers.alice.get("/evals/a%20b")).status_code == 422
    assert (await callers.alice.get("/evals")).json()["evals"] == []  # nothing was stored


async def test_a_report_may_be_larger_than_other_bodies_up_to_its_own_limit(
    callers: Callers,
) -> None:
    """The app accepts 64 KiB bodies here; a report of 400 cases (about 1 MiB) is stored, and
    one over MAX_REPORT_BYTES is 413 saying how large a report may be."""
    large = report("ev-large", [case(f"case-{i}", answer="w" * 2000) for i in range(400)])
    text = json.dumps(body(large))
    assert 65_536 * 10 < len(text) < MAX_REPORT_BYTES
    stored = await callers.alice.put("/evals/ev-large", content=text.encode(),
                                     headers={"Content-Type": "application/json"})
    assert stored.status_code == 200, stored.text
    got = await callers.alice.get("/evals/ev-large")
    assert EvalReport.model_validate(got.json()) == large
    too_large = await callers.alice.put(
        "/evals/ev-huge", content=b" " * (MAX_REPORT_BYTES + 1),
        headers={"Content-Type": "application/json"})
    assert too_large.status_code == 413 and "an eval's report may take 8 MiB" in too_large.text
    for method, path in (("POST", "/runs/run-x/approvals/0000-tool-000"),
                         ("POST", "/evals/ev-large")):  # every other route keeps its limit
        other = await callers.alice.request(method, path, content=b" " * 70_000,
                                            headers={"Content-Type": "application/json"})
        assert other.status_code == 413, (path, other.text)


async def test_without_a_token_nothing_is_read_or_stored(callers: Callers) -> None:
    sent = body(report("ev-anon", [case("a")]))
    for answer in (await callers.nobody.put("/evals/ev-anon", json=sent),
                   await callers.nobody.get("/evals"),
                   await callers.nobody.get("/evals/ev-anon")):
        assert answer.status_code == 401, answer.text
    assert await callers.deps.store.evals.list_reports("anonymous") == []


def test_the_openapi_document_describes_the_evals_routes() -> None:
    document = create_app(Settings(api_auth="none")).openapi()
    paths = document["paths"]
    assert set(paths["/evals/{eval_id}"]) == {"put", "get"} and set(paths["/evals"]) == {"get"}
    assert {"200", "401", "413", "422", "503"} <= set(paths["/evals/{eval_id}"]["put"]["responses"])
    assert "404" in paths["/evals/{eval_id}"]["get"]["responses"]
    schemas = document["components"]["schemas"]
    assert {"eval_id", "summary", "stored_at"} <= set(schemas["EvalHead"]["properties"])
    assert "cases" not in schemas["EvalHead"]["properties"]
    assert {"cases", "summary"} <= set(schemas["EvalReport"]["properties"])
    assert {"pass_at_k", "pass_all_k", "eval_cost_usd"} <= set(schemas["Summary"]["properties"])


@pytest.mark.emulator
@pytest.mark.slow
async def test_a_report_put_to_a_stack_is_the_inspectors_to_show(
    api: httpx.AsyncClient, api_stack: RunningStack,
) -> None:
    """Through the api process of a stack (auth none: the anonymous caller), as `ackloop eval`
    against a deployment sends it; the store holds it for the anonymous caller, whom the local
    CLI writes as."""
    eval_id = f"ev-{uuid.uuid4().hex[:8]}"
    sent = report(eval_id, [case("paris"), case("lyon", passed=False)],
                  started_at=time.time() + 1e9)  # the latest of all
    stored = await api.put(f"/evals/{eval_id}", json=body(sent))
    assert stored.status_code == 200, stored.text
    assert EvalReport.model_validate((await api.get(f"/evals/{eval_id}")).json()) == sent
    listed = (await api.get("/evals", params={"limit": 1})).json()
    assert [e["eval_id"] for e in listed["evals"]] == [eval_id]
    assert await api_stack.store().evals.get_report(eval_id, "anonymous") == sent
