"""The run inspector's page (``/ui``) and the routes it reads, over real HTTP on 127.0.0.1.

The page's files are checked as a browser receives them (types, caching, a policy that lets
nothing load from elsewhere); the routes run against the engine of a real stack on the
emulators, with each auth mode's callers.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import pytest

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.engine.deps import Deps
from ackloop.hosting.runtime import build_deps
from tests.api.test_auth import TOKEN, _no_deps, serving
from tests.api.test_runs_http import WEATHER, wait_finished
from tests.api.tokens_support import Issuer
from tests.support.stack import RunningStack

AUDIENCE = "https://ackloop-api.example.run.app"
SCRIPTS = ["app.js", "chat.js", "evals.js", "files.js", "letters.js", "live.js", "run.js",
           "runs.js", "schedules.js", "ui.js"]
ASSETS = {"/ui": "text/html", "/ui/style.css": "text/css",
          **{f"/ui/{name}": "text/javascript" for name in SCRIPTS}}


@pytest.fixture
async def page() -> AsyncIterator[httpx.AsyncClient]:
    """The app with no engine behind it: the page's files need none."""
    async with serving(create_app(Settings(), deps=_no_deps)) as url, \
            httpx.AsyncClient(base_url=url) as client:
        yield client


# -- the page ----------------------------------------------------------------------------------


async def test_the_page_and_its_assets_come_with_their_types_and_revalidate(
    page: httpx.AsyncClient,
) -> None:
    for path, media in ASSETS.items():
        got = await page.get(path)
        assert got.status_code == 200, path
        assert got.headers["content-type"].split(";")[0] == media
        assert got.headers["cache-control"] == "no-cache"  # unversioned names: always revalidate
        assert got.headers["x-content-type-options"] == "nosniff"
        again = await page.get(path, headers={"If-None-Match": got.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
    html = (await page.get("/ui")).text
    assert '<html lang="en">' in html and 'name="viewport"' in html
    for needed in ('id="token"', 'id="notice" role="alert"', 'src="/ui/app.js"',
                   'href="/ui/style.css"'):
        assert needed in html
    slash = await page.get("/ui/", follow_redirects=False)
    assert slash.status_code == 308 and slash.headers["location"] == "/ui"
    missing = await page.get("/ui/secrets.txt")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert "/ui" not in (await page.get("/openapi.json")).json()["paths"]


async def test_nothing_is_loaded_from_elsewhere(page: httpx.AsyncClient) -> None:
    """Works with no internet: no URL of another host in any file, and the browser is told to
    load nothing from one."""
    policy = (await page.get("/ui")).headers["content-security-policy"]
    assert "default-src 'self'" in policy and "connect-src 'self'" in policy
    assert "http" not in policy and "*" not in policy
    shipped = resources.files("ackloop.api").joinpath("ui_assets")
    names = sorted(f.name for f in shipped.iterdir())
    assert names == sorted([*SCRIPTS, "index.html", "style.css"])
    for name in names:
        text = shipped.joinpath(name).read_text()
        assert not re.search(r"(https?:)?//[a-z0-9.-]+\.[a-z]{2,}", text, re.I), name
        assert "@import" not in text and "url(" not in text, name
        served = await page.get("/ui" if name == "index.html" else f"/ui/{name}")
        assert served.text == text  # what the package ships is what is served


async def test_every_module_a_script_imports_is_served(page: httpx.AsyncClient) -> None:
    """The page's modules import each other by relative name: each one named is served."""
    shipped = resources.files("ackloop.api").joinpath("ui_assets")
    imported = {name for script in SCRIPTS for name in re.findall(
        r'from "\./([\w.-]+)"', shipped.joinpath(script).read_text())}
    assert imported == set(SCRIPTS) - {"app.js"}
    for name in imported:
        assert (await page.get(f"/ui/{name}")).status_code == 200, name


async def test_the_page_needs_no_token_but_the_data_does(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    app = create_app(Settings(api_auth="bearer", api_bearer_token_file=str(token_file)),
                     deps=_no_deps)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.get("/ui")).status_code == 200
        assert (await client.get("/ui/app.js")).status_code == 200
        for path in ("/runs", "/runs/run-x/transcript", "/dead-letters", "/poison", "/evals",
                     "/evals/ev-x", "/agents", "/conversations/c-1/runs",
                     f"/runs/run-x/files/{'0' * 64}"):
            refused = await client.get(path)
            assert refused.status_code == 401, path
            assert refused.headers["www-authenticate"] == "Bearer"
        redrive = await client.post("/dead-letters/m-1/redrive")
        assert redrive.status_code == 401


# -- the routes, on the shared stack (auth none: the anonymous caller is an operator) ----------


@pytest.mark.emulator
@pytest.mark.slow
async def test_runs_are_listed_newest_first_filtered_and_paged(
    api: httpx.AsyncClient,
) -> None:
    conversation = f"conv-{uuid.uuid4().hex[:8]}"
    first = (await api.post("/runs", json={"text": "where am I?",
                                            "conversation_id": conversation})).json()
    await wait_finished(api, first["run_id"])
    second = (await api.post("/runs", json={"text": "and the weather there?",
                                             "conversation_id": conversation})).json()
    await wait_finished(api, second["run_id"])

    listed = await api.get("/runs", params={"conversation_id": conversation})
    assert listed.status_code == 200, listed.text
    runs = listed.json()["runs"]
    assert [r["run_id"] for r in runs] == [second["run_id"], first["run_id"]]
    assert runs[0]["text"] == "and the weather there?" and runs[0]["status"] == "completed"
    assert listed.json()["next"] is None

    page = (await api.get("/runs", params={"conversation_id": conversation,
                                           "limit": 1})).json()
    assert [r["run_id"] for r in page["runs"]] == [second["run_id"]]
    assert page["next"] is not None
    rest = (await api.get("/runs", params={"conversation_id": conversation, "limit": 1,
                                           "before": page["next"]})).json()
    assert [r["run_id"] for r in rest["runs"]] == [first["run_id"]]

    failed = (await api.get("/runs", params={"conversation_id": conversation,
                                             "status": "failed"})).json()
    assert failed["runs"] == []
    other_agent = (await api.get("/runs", params={"conversation_id": conversation,
                                                  "agent": "nobody"})).json()
    assert other_agent["runs"] == []
    newest = (await api.get("/runs", params={"status": "completed", "limit": 5})).json()
    assert all(r["status"] == "completed" for r in newest["runs"])
    created = [r["created_at"] for r in newest["runs"]]
    assert created == sorted(created, reverse=True)


@pytest.mark.emulator
@pytest.mark.slow
@pytest.mark.parametrize(("params", "field"), [
    ({"status": "done"}, "query.status"),
    ({"agent": "not an id!"}, "query.agent"),
    ({"limit": "0"}, "query.limit"),
    ({"before": "yesterday"}, "query.before"),
])
async def test_a_bad_filter_is_422_naming_it(api: httpx.AsyncClient, params: dict[str, str],
                                             field: str) -> None:
    answer = await api.get("/runs", params=params)
    assert answer.status_code == 422
    assert [f["field"] for f in answer.json()["fields"]] == [field]


@pytest.mark.emulator
@pytest.mark.slow
async def test_the_transcript_shows_calls_with_arguments_and_results(
    api: httpx.AsyncClient,
) -> None:
    run_id = (await api.post("/runs", json={"text": WEATHER})).json()["run_id"]
    run = await wait_finished(api, run_id)
    assert run["status"] == "completed"
    answer = await api.get(f"/runs/{run_id}/transcript")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["run_id"] == run_id and body["conversation_id"] == run["conversation_id"]
    contents = body["contents"]
    assert contents[0] == {"role": "user", "parts": [{"text": WEATHER}]}
    parts = [p for c in contents for p in c["parts"]]
    calls = [p["function_call"] for p in parts if "function_call" in p]
    responses = [p["function_response"] for p in parts if "function_response" in p]
    assert [c["name"] for c in calls] == [r["name"] for r in responses] == [
        s["name"] for s in run["steps"] if s["kind"] == "tool"]
    assert all(isinstance(c.get("args"), dict) for c in calls)
    assert all(isinstance(r["response"], dict) and r["response"] for r in responses)
    assert contents[-1]["role"] == "model" and contents[-1]["parts"][-1]["text"] == run["answer"]
    assert not any("thought_signature" in p for p in parts)
    missing = await api.get("/runs/run-nope/transcript")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"


@pytest.mark.emulator
@pytest.mark.slow
async def test_poison_is_listed_for_operators(api: httpx.AsyncClient,
                                              api_stack: RunningStack) -> None:
    message_id = api_stack.publish(api_stack.settings.queries_topic, b'{"v": 1, "text": 7}')
    found: list[dict[str, Any]] = []
    for _ in range(100):
        poison = (await api.get("/poison")).json()["poison"]
        found = [p for p in poison if p["message_id"] == message_id]
        if found:
            break
        await asyncio.sleep(0.3)
    (record,) = found
    assert record["kind"] == "query" and record["reason"] == "poison_message"
    assert "not a valid query message" in (record["error"] or "")
    assert record["data_preview"] == '{"v": 1, "text": 7}'
    letters = await api.get("/dead-letters")
    assert letters.status_code == 200 and isinstance(letters.json()["dead_letters"], list)


# -- who may see what ----------------------------------------------------------------------------


@dataclass
class Callers:
    alice: httpx.AsyncClient
    mallory: httpx.AsyncClient
    mallory_id: str


@pytest.fixture
def serve_with(api_stack: RunningStack) -> Callable[..., Any]:
    """``serve_with(**settings)``: the API in front of the stack's engine, with those settings."""

    async def make(**changes: Any) -> Any:
        settings = api_stack.settings.model_copy(update=changes)
        built = await build_deps(settings)

        async def engine() -> Deps:
            return built

        return settings, engine

    return make


@pytest.fixture
async def callers(serve_with: Callable[..., Any]) -> AsyncIterator[Callers]:
    """Alice (an operator) and Mallory (not one), with Google ID tokens; new callers each time,
    so that no other test's runs are theirs."""
    issuer = Issuer()
    alice, mallory = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("alice", "mallory"))
    settings, engine = await serve_with(
        api_auth="google_id_token", api_id_token_audience=AUDIENCE,
        api_operators=f"google:someone-else, google:{alice}")
    app = create_app(settings, deps=engine, id_token_verifier=issuer.verifier())

    def bearer(subject: str) -> dict[str, str]:
        token = issuer.token(AUDIENCE, sub=subject, email=f"{subject}@example.com")
        return {"Authorization": f"Bearer {token}"}

    async with serving(app) as url, \
            httpx.AsyncClient(base_url=url, timeout=30, headers=bearer(alice)) as alices, \
            httpx.AsyncClient(base_url=url, timeout=30, headers=bearer(mallory)) as mallorys:
        yield Callers(alices, mallorys, f"google:{mallory}")


@pytest.mark.emulator
@pytest.mark.slow
async def test_each_caller_lists_only_their_runs_and_transcripts(callers: Callers) -> None:
    mine = (await callers.alice.post("/runs", json={"text": "where am I?"})).json()
    theirs = (await callers.mallory.post("/runs", json={"text": "where am I?"})).json()
    await wait_finished(callers.alice, mine["run_id"])
    await wait_finished(callers.mallory, theirs["run_id"])
    alices = [r["run_id"] for r in (await callers.alice.get("/runs")).json()["runs"]]
    mallorys = [r["run_id"] for r in (await callers.mallory.get("/runs")).json()["runs"]]
    assert mine["run_id"] in alices and theirs["run_id"] not in alices
    assert mallorys == [theirs["run_id"]]  # a new caller: their one run, no one else's
    assert (await callers.alice.get(f"/runs/{mine['run_id']}/transcript")).status_code == 200
    peek = await callers.mallory.get(f"/runs/{mine['run_id']}/transcript")
    assert peek.status_code == 404 and peek.json()["code"] == "not_found"
    by_conversation = await callers.mallory.get(
        "/runs", params={"conversation_id": mine["conversation_id"]})
    assert by_conversation.json()["runs"] == []


@pytest.mark.emulator
@pytest.mark.slow
async def test_dead_letters_and_poison_are_for_operators_only(callers: Callers) -> None:
    for path in ("/dead-letters", "/poison"):
        assert (await callers.alice.get(path)).status_code == 200, path
        refused = await callers.mallory.get(path)
        assert refused.status_code == 403, path
        assert refused.json()["code"] == "forbidden"
        assert repr(callers.mallory_id) in refused.json()["error"]
        assert "ACKLOOP_API_OPERATORS" in refused.json()["error"]
    redrive = await callers.mallory.post("/dead-letters/m-1/redrive")
    assert redrive.status_code == 403
    unknown = await callers.alice.post(f"/dead-letters/m-{uuid.uuid4().hex}/redrive")
    assert unknown.status_code == 404 and unknown.json()["code"] == "not_found"


@pytest.mark.emulator
@pytest.mark.slow
async def test_the_bearer_is_an_operator_only_when_named(
    serve_with: Callable[..., Any], tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    for operators, status in ((None, 403), ("bearer", 200)):
        settings, engine = await serve_with(
            api_auth="bearer", api_bearer_token_file=str(token_file), api_operators=operators)
        async with serving(create_app(settings, deps=engine)) as url, \
                httpx.AsyncClient(base_url=url, timeout=30) as client:
            assert (await client.get("/dead-letters")).status_code == 401
            letters = await client.get("/dead-letters", headers=auth)
            assert letters.status_code == status, letters.text
            assert (await client.get("/runs", headers=auth)).status_code == 200


@pytest.mark.emulator
@pytest.mark.slow
async def test_redrive_of_a_real_dead_letter_reopens_its_run_until_it_answers(
    fresh_stack: Callable[..., RunningStack],
) -> None:
    """A model step that keeps being told to wait longer than a request may (429, retry after
    30 s, beyond retry_wait_seconds) releases its step on every delivery and uses up its
    deliveries; the dead-letter function records it and fails the run with the step's last
    error as its cause. Once the model answers again, re-driving it through the API finishes
    the run.

    Shipped engine settings; the push delivery keeps production's policy shape at a tenth of its
    time (backoff 1, 2, 4, 8 s) and Pub/Sub's minimum of 5 attempts, so this takes ~20 s, not
    ~3 minutes."""
    stack = fresh_stack(max_delivery_attempts=5, push_time_scale=0.1)
    stack.schedule_model_faults("429:30*40")
    async with httpx.AsyncClient(base_url=stack.state.api_url, timeout=30) as api:
        run_id = (await api.post("/runs", json={"text": "tell me a joke"})).json()["run_id"]
        failed = await wait_finished(api, run_id, within=120)
        assert failed["status"] == "failed" and failed["error"].startswith("dead_lettered")
        assert "429" in failed["error"]  # the cause: the step's last recorded error
        letters = await stack.store().letters.list_dead_letters()
        assert [(d.data["run_id"], d.data["step"]) for d in letters] == [(run_id, "0000-model")]
        (letter,) = (await api.get("/dead-letters")).json()["dead_letters"]
        assert (letter["run_id"], letter["step"], letter["origin"]) == (
            run_id, "0000-model", "model_steps")
        assert "429" in letter["cause"] and letter["redriven_at"] is None
        assert f'"run_id":"{run_id}"' in letter["data_preview"].replace(" ", "")

        (await api.post(f"{stack.fake_gemini}/_admin/reset")).raise_for_status()
        redriven = await api.post(f"/dead-letters/{letter['message_id']}/redrive")
        assert redriven.status_code == 200, redriven.text
        assert redriven.json() | {"cause": ""} == {
            "message_id": letter["message_id"], "run_id": run_id, "step": "0000-model",
            "outcome": "redriven", "cause": ""}
        run = await wait_finished(api, run_id, within=60)
        assert run["status"] == "completed" and run["answer"], run
        (after,) = (await api.get("/dead-letters")).json()["dead_letters"]
        assert after["redrive_outcome"] == "redriven" and after["redriven_at"] is not None
        again = await api.post(f"/dead-letters/{letter['message_id']}/redrive")
        assert again.status_code == 409 and "re-driven already" in again.json()["error"]
