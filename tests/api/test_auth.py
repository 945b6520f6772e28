"""API auth modes and Pub/Sub push token checks, over real HTTP on 127.0.0.1, offline."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ackloop.api.app import create_app
from ackloop.api.errors import ApiError
from ackloop.api.tokens import split_emails
from ackloop.config.settings import Settings
from ackloop.engine.deps import Deps
from ackloop.http_push import authenticate_push
from ackloop.model.scripted import ScriptedModel
from ackloop.model.turns import text_turn
from ackloop.telemetry.metrics import PUSH_ANSWERS
from ackloop.telemetry.metrics_file import Series
from tests.api.tokens_support import Issuer, as_forwarded_by_cloud_run
from tests.engine.fakes import CountingToolbox, make_loop
from tests.support.stack import RunningStack

TOKEN = "a-long-enough-shared-token-0123456789"
UNKNOWN_METHOD = {"class_method": "nope", "input": {}}


async def _no_deps() -> Deps:
    raise AssertionError("these requests never reach the engine")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port for the duration."""
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and not task.done(), "server did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def test_bearer_mode_needs_the_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    app = create_app(Settings(api_auth="bearer", api_bearer_token_file=str(token_file)),
                     deps=_no_deps)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        missing = await client.post("/api/reasoning_engine", json=UNKNOWN_METHOD)
        wrong = await client.post("/api/reasoning_engine", json=UNKNOWN_METHOD,
                                  headers={"Authorization": "Bearer not-the-token"})
        right = await client.post("/api/reasoning_engine", json=UNKNOWN_METHOD,
                                  headers={"Authorization": f"Bearer {TOKEN}"})
        runs = await client.get("/runs/run-x")
        openapi = await client.get("/openapi.json")
    assert (missing.status_code, wrong.status_code, runs.status_code) == (401, 401, 401)
    assert missing.headers["www-authenticate"] == "Bearer"
    assert wrong.json() == {"error": "authentication required", "code": "unauthenticated"}
    assert right.status_code == 400  # past auth: the unknown class method is the problem now
    assert openapi.status_code == 200


def test_auth_settings_are_checked_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="BEARER_TOKEN_FILE"):
        create_app(Settings(api_auth="bearer"))
    short = tmp_path / "short"
    short.write_text("abc")
    with pytest.raises(ValueError, match="16 characters"):
        create_app(Settings(api_auth="bearer", api_bearer_token_file=str(short)))
    with pytest.raises(ValueError, match="AUDIENCE"):
        create_app(Settings(api_auth="google_id_token"))


async def test_google_id_tokens_are_checked_for_signature_issuer_audience_and_email() -> None:
    issuer = Issuer()
    audience = "https://ackloop-api.example.run.app"
    settings = Settings(api_auth="google_id_token", api_id_token_audience=audience)
    app = create_app(settings, deps=_no_deps,
                     id_token_verifier=issuer.verifier(emails=("caller@example.com",)))
    cases = {
        "valid": (issuer.token(audience), 400),
        "other audience": (issuer.token("https://elsewhere.example"), 401),
        "not Google's issuer": (issuer.token(audience, iss="https://evil.example"), 401),
        "expired": (issuer.token(audience, iat=int(time.time()) - 7200,
                                 exp=int(time.time()) - 3600), 401),
        "email not allowed": (issuer.token(audience, email="someone@example.com"), 401),
        "signed by another key": (issuer.token(audience, key=Issuer.other_key()), 401),
        "not a JWT": ("abc.def.ghi", 401),
    }
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for name, (token, status) in cases.items():
            response = await client.post("/api/reasoning_engine", json=UNKNOWN_METHOD,
                                         headers={"Authorization": f"Bearer {token}"})
            assert response.status_code == status, (name, response.text)
    assert issuer.certs.calls == 1  # Google's certificates are fetched once, then cached


SWEEPER = "ackloop-sweeper@proj.iam.gserviceaccount.com"
API_CALLER = "team-bot@proj.iam.gserviceaccount.com"


async def _past_auth() -> Deps:
    """Reached only by a request that passed authentication: a distinctive answer, no engine."""
    raise ApiError(418, "past_auth", "authenticated")


async def test_cloud_run_iam_without_emails_names_each_invoker_apart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """S2, the deployment's default: every invoker Cloud Run IAM lets in is a caller of their
    own (by subject), so one invoker's run is not another's to read or list; a request without
    the checked token is refused. ``none`` is still possible, and warned about at start-up."""
    issuer = Issuer()
    loop = make_loop(ScriptedModel.from_turns([text_turn("hi")]), CountingToolbox())

    async def deps() -> Deps:
        return loop.deps

    app = create_app(Settings(api_auth="cloud_run_iam"), deps=deps)

    def as_invoker(email: str, subject: str) -> dict[str, str]:
        token = as_forwarded_by_cloud_run(issuer.token(
            "32555940559.apps.googleusercontent.com", email=email, sub=subject))
        return {"Authorization": f"Bearer {token}"}

    ada, bo = as_invoker("ada@example.com", "111"), as_invoker("bo@example.com", "222")
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        created = await client.post("/runs", json={"text": "hello"}, headers=ada)
        assert created.status_code == 202, created.text
        run_id = created.json()["run_id"]
        mine = await client.get(f"/runs/{run_id}", headers=ada)
        theirs = await client.get(f"/runs/{run_id}", headers=bo)
        listed_for_bo = await client.get("/runs", headers=bo)
        nobody = await client.get("/runs")
    assert mine.status_code == 200 and mine.json()["run_id"] == run_id
    assert theirs.status_code == 404
    assert run_id not in listed_for_bo.text and listed_for_bo.status_code == 200
    assert nobody.status_code == 401
    run = await loop.deps.store.get_run(run_id)
    assert run is not None and run.owner == "google:111"
    with caplog.at_level("WARNING", logger="ackloop.api.auth"):
        create_app(Settings(api_auth="none"))
    assert any("ACKLOOP_API_AUTH=none" in r.getMessage() and "every run" in r.getMessage()
               for r in caplog.records)


async def test_cloud_run_iam_mode_checks_who_the_checked_token_names() -> None:
    """The API behind Cloud Run IAM, with one token per caller (as gcloud prints it): with
    emails set, the app reads the claims Cloud Run verified and lets only those through."""
    issuer = Issuer()
    app = create_app(Settings(api_auth="cloud_run_iam", api_id_token_emails=API_CALLER),
                     deps=_past_auth)

    def forwarded(email: str, **claims: object) -> str:
        return as_forwarded_by_cloud_run(issuer.token("32555940559.apps.googleusercontent.com",
                                                      email=email, **claims))

    cases = {
        "allowed caller": ({"Authorization": f"Bearer {forwarded(API_CALLER)}"}, 400),
        "another invoker": ({"Authorization": f"Bearer {forwarded('someone@example.com')}"}, 401),
        "no token": ({}, 401),
        "forged Authorization next to the checked header": (
            {"X-Serverless-Authorization": f"Bearer {forwarded('someone@example.com')}",
             "Authorization": f"Bearer {forwarded(API_CALLER)}"}, 401),
        "expired": ({"Authorization": f"Bearer {forwarded(API_CALLER, exp=1)}"}, 401),
    }
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for name, (headers, status) in cases.items():
            response = await client.post("/api/reasoning_engine", json=UNKNOWN_METHOD,
                                         headers=headers)
            assert response.status_code == status, (name, response.text)


API_URL = "https://ackloop-api.example.run.app"


def _unsigned(token: str) -> str:
    """``token`` with its header saying ``alg: none`` and no signature at all."""
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    return f"{header.decode().rstrip('=')}.{token.split('.')[1]}."


async def _sweep_statuses(settings: Settings, issuer: Issuer,
                          tokens: dict[str, str]) -> dict[str, int]:
    """The status of POST /sweep with each of ``tokens`` in Authorization, and of the first one
    on another route (``elsewhere``)."""
    callers = tuple(split_emails(settings.api_id_token_emails))
    app = create_app(settings, deps=_past_auth, id_token_verifier=issuer.verifier(callers))
    statuses = {}
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        for name, token in tokens.items():
            response = await client.post("/sweep", headers={"Authorization": f"Bearer {token}"})
            statuses[name] = response.status_code
        first = next(iter(tokens.values()))
        elsewhere = await client.post("/api/reasoning_engine", json=UNKNOWN_METHOD,
                                      headers={"Authorization": f"Bearer {first}"})
        statuses["elsewhere"] = elsewhere.status_code
    return statuses


async def test_the_scheduled_sweeper_is_checked_as_the_mode_checks_every_token(
    tmp_path: Path,
) -> None:
    """Behind Cloud Run IAM (``cloud_run_iam``) the sweeper's Cloud Run-checked token opens
    POST /sweep; in the modes where the app verifies tokens itself, only a Google-signed one
    for the API's audience does. Without ACKLOOP_API_SWEEPER_EMAIL, nobody's token does, and the
    sweeper's opens nothing else."""
    issuer = Issuer()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    signed = issuer.token(API_URL, email=SWEEPER)
    tokens = {"signed": signed, "stripped": as_forwarded_by_cloud_run(signed),
              "intruder": issuer.token(API_URL, email="intruder@example.com"),
              "other audience": issuer.token("https://elsewhere.example", email=SWEEPER)}
    expected = {
        "bearer": {"signed": 418, "stripped": 401, "intruder": 401, "other audience": 401},
        "google_id_token": {"signed": 418, "stripped": 401, "intruder": 401,
                            "other audience": 401},
        "cloud_run_iam": {"signed": 418, "stripped": 418, "intruder": 401,
                          "other audience": 401},
    }
    modes = [
        Settings(api_auth="bearer", api_bearer_token_file=str(token_file)),
        Settings(api_auth="google_id_token", api_id_token_emails=API_CALLER),
        Settings(api_auth="cloud_run_iam", api_id_token_emails=API_CALLER),
    ]
    for settings in modes:
        configured = settings.model_copy(update={"api_sweeper_email": SWEEPER,
                                                 "api_id_token_audience": API_URL})
        plain = settings.model_copy(update={"api_id_token_audience": API_URL})
        statuses = await _sweep_statuses(configured, issuer, tokens)
        assert statuses == expected[settings.api_auth] | {"elsewhere": 401}, settings.api_auth
        unconfigured = await _sweep_statuses(plain, issuer, tokens)
        assert set(unconfigured.values()) == {401}, (settings.api_auth, unconfigured)


async def test_an_unsigned_token_naming_the_sweeper_does_not_open_the_sweep(
    tmp_path: Path,
) -> None:
    """Security finding: in bearer mode an unsigned token whose claims name the sweeper opened
    POST /sweep (its claims were read as if Cloud Run had checked them) while it got 401 on every
    other route. Now it is a 401 there too, with ``alg: none`` or a signature of another key, as
    is the Cloud Run-stripped token (nothing vouches for it in this mode); a token the app can
    verify still sweeps, and an operator's shared token too."""
    issuer = Issuer()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    settings = Settings(api_auth="bearer", api_bearer_token_file=str(token_file),
                        api_sweeper_email=SWEEPER, api_id_token_audience=API_URL,
                        api_operators="bearer")
    signed = issuer.token(API_URL, email=SWEEPER)
    statuses = await _sweep_statuses(settings, issuer, {
        "alg none": _unsigned(signed),
        "another key": issuer.token(API_URL, email=SWEEPER, key=Issuer.other_key()),
        "stripped": as_forwarded_by_cloud_run(signed),
        "signed": signed,
        "operator": TOKEN,
    })
    assert statuses == {"alg none": 401, "another key": 401, "stripped": 401, "signed": 418,
                        "operator": 418, "elsewhere": 401}


async def test_a_forged_sweeper_token_next_to_the_checked_one_is_not_the_sweeper() -> None:
    """Under ``cloud_run_iam`` the sweeper is read only from the token Cloud Run checked: an
    invoker who sends their own token in X-Serverless-Authorization and a forged one naming the
    sweeper in Authorization is that invoker (not an operator: 403), not the sweeper."""
    issuer = Issuer()
    settings = Settings(api_auth="cloud_run_iam", api_sweeper_email=SWEEPER)
    invoker = as_forwarded_by_cloud_run(issuer.token(API_URL, email=API_CALLER))
    forged = _unsigned(issuer.token(API_URL, email=SWEEPER))
    app = create_app(settings, deps=_past_auth)
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
        sweep = await client.post("/sweep", headers={
            "X-Serverless-Authorization": f"Bearer {invoker}",
            "Authorization": f"Bearer {forged}"})
    assert sweep.status_code == 403, sweep.text


def test_the_sweeper_in_a_verifying_mode_needs_the_audience(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with pytest.raises(ValueError, match="ACKLOOP_API_ID_TOKEN_AUDIENCE"):
        create_app(Settings(api_auth="bearer", api_bearer_token_file=str(token_file),
                            api_sweeper_email=SWEEPER))


async def test_a_sweep_is_for_operators_and_the_sweeper_with_bounded_parameters(
    tmp_path: Path,
) -> None:
    """S3: any authenticated caller could sweep every owner's runs (and read their ids in the
    answer) with any stale_seconds. Now a caller who is not an operator gets 403 and reaches
    nothing; an operator reaches the sweep; an idle time under half a second is a 422."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    as_bearer = {"Authorization": f"Bearer {TOKEN}"}
    plain = Settings(api_auth="bearer", api_bearer_token_file=str(token_file))
    operator = plain.model_copy(update={"api_operators": "bearer"})
    for settings, expected in ((plain, 403), (operator, 418)):
        app = create_app(settings, deps=_past_auth)
        async with serving(app) as url, httpx.AsyncClient(base_url=url) as client:
            sweep = await client.post("/sweep", headers=as_bearer)
            tiny = await client.post("/sweep", params={"stale_seconds": 0.001},
                                     headers=as_bearer)
        assert sweep.status_code == expected, (settings.api_operators, sweep.text)
        assert tiny.status_code == 422 and "stale_seconds" in tiny.text
    assert "ACKLOOP_API_OPERATORS" in (await _forbidden(plain, as_bearer))


async def _forbidden(settings: Settings, headers: dict[str, str]) -> str:
    async with serving(create_app(settings, deps=_past_auth)) as url, \
            httpx.AsyncClient(base_url=url) as client:
        return (await client.post("/sweep", headers=headers)).text


def _push_app(settings: Settings, issuer: Issuer) -> Starlette:
    async def endpoint(request: Request) -> Response:
        refused = await authenticate_push(settings, request, issuer.verifier())
        return Response(refused or "", status_code=401 if refused else 204)

    return Starlette(routes=[Route("/", endpoint, methods=["POST"])])


PUSH_EMAIL = "ackloop-push@proj.iam.gserviceaccount.com"
PUSH_AUDIENCE = "ackloop-push:proj"


def test_push_auth_needs_its_email_and_audience() -> None:
    """Without the email a token of any service account would pass; without the audience, a
    token minted for any service (or an audience read off the request's Host header)."""
    for mode in ("oidc", "cloud_run_iam"):
        with pytest.raises(ValueError, match="ACKLOOP_PUSH_AUTH_EMAIL"):
            Settings(push_auth=mode, push_auth_audience=PUSH_AUDIENCE)
        with pytest.raises(ValueError, match="ACKLOOP_PUSH_AUTH_AUDIENCE"):
            Settings(push_auth=mode, push_auth_email=PUSH_EMAIL)
        Settings(push_auth=mode, push_auth_email=PUSH_EMAIL, push_auth_audience=PUSH_AUDIENCE)


async def test_push_oidc_verifies_signature_for_the_configured_audience_and_email() -> None:
    issuer = Issuer()
    settings = Settings(push_auth="oidc", push_auth_email=PUSH_EMAIL,
                        push_auth_audience=PUSH_AUDIENCE)
    async with serving(_push_app(settings, issuer)) as url, \
            httpx.AsyncClient(base_url=url) as client:
        async def push(token: str | None, host: str | None = None) -> int:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            if host:
                headers["Host"] = host
            return (await client.post("/", json={}, headers=headers)).status_code

        assert await push(issuer.token(PUSH_AUDIENCE, email=PUSH_EMAIL)) == 204
        assert await push(None) == 401
        other = "other@proj.iam.gserviceaccount.com"
        assert await push(issuer.token(PUSH_AUDIENCE, email=other)) == 401
        assert await push(issuer.token(PUSH_AUDIENCE, email=PUSH_EMAIL,
                                       email_verified=False)) == 401
        # The audience is the configured one, never the request's Host.
        assert await push(issuer.token("https://evil.example", email=PUSH_EMAIL),
                          host="evil.example") == 401
        # A token Cloud Run already checked has no signature left: oidc cannot accept it.
        forwarded = as_forwarded_by_cloud_run(issuer.token(PUSH_AUDIENCE, email=PUSH_EMAIL))
        assert await push(forwarded) == 401
    off = Settings()
    async with serving(_push_app(off, issuer)) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/", json={})).status_code == 204


async def test_push_behind_cloud_run_iam_checks_the_forwarded_claims() -> None:
    """What a push service sees in production: Pub/Sub's token, verified by Cloud Run IAM and
    forwarded with its signature removed. Its claims still have to name the push identity and
    the configured audience."""
    issuer = Issuer()
    settings = Settings(push_auth="cloud_run_iam", push_auth_email=PUSH_EMAIL,
                        push_auth_audience=PUSH_AUDIENCE)

    def forwarded(audience: str = PUSH_AUDIENCE, **claims: object) -> str:
        return as_forwarded_by_cloud_run(issuer.token(audience, **({"email": PUSH_EMAIL} | claims)))

    past = int(time.time()) - 3600
    cases: dict[str, tuple[dict[str, str], int]] = {
        "the push identity": ({"Authorization": f"Bearer {forwarded()}"}, 204),
        "still signed (no Cloud Run in front strips it)":
            ({"Authorization": f"Bearer {issuer.token(PUSH_AUDIENCE, email=PUSH_EMAIL)}"}, 204),
        "no token": ({}, 401),
        "another service account": (
            {"Authorization": f"Bearer {forwarded(email='intruder@proj.iam.gserviceaccount.com')}"},
            401),
        "email not verified": ({"Authorization": f"Bearer {forwarded(email_verified=False)}"}, 401),
        "another audience": (
            {"Authorization": f"Bearer {forwarded('https://other.run.app')}"}, 401),
        "expired": ({"Authorization": f"Bearer {forwarded(iat=past - 600, exp=past)}"}, 401),
        "not Google's issuer": (
            {"Authorization": f"Bearer {forwarded(iss='https://evil.example')}"}, 401),
        "not a JWT": ({"Authorization": "Bearer abc.def.SIGNATURE_REMOVED_BY_GOOGLE"}, 401),
        # Cloud Run checks X-Serverless-Authorization when present and passes Authorization on
        # untouched: only the checked header counts.
        "checked header is someone else's, Authorization forged": (
            {"X-Serverless-Authorization": f"Bearer {forwarded(email='user@example.com')}",
             "Authorization": f"Bearer {forwarded()}"}, 401),
        "checked header is the push identity": (
            {"X-Serverless-Authorization": f"Bearer {forwarded()}",
             "Authorization": "Bearer something-else"}, 204),
    }
    async with serving(_push_app(settings, issuer)) as url, \
            httpx.AsyncClient(base_url=url) as client:
        for name, (headers, status) in cases.items():
            response = await client.post("/", json={}, headers=headers)
            assert response.status_code == status, (name, response.text)
    assert issuer.certs.calls == 0, "cloud_run_iam never fetches certificates"


@pytest.mark.emulator
@pytest.mark.slow
async def test_step_function_refuses_unauthenticated_pushes_and_counters_when_configured(
    fresh_stack: Callable[..., RunningStack],
) -> None:
    env = {"ACKLOOP_PUSH_AUTH": "cloud_run_iam", "ACKLOOP_PUSH_AUTH_EMAIL": PUSH_EMAIL,
           "ACKLOOP_PUSH_AUTH_AUDIENCE": PUSH_AUDIENCE}
    stack = fresh_stack(service_env={"model_step": env})
    data = json.dumps({"v": 1, "kind": "model", "run_id": "run-x", "turn": 0}).encode()
    envelope = {"message": {"data": base64.b64encode(data).decode(), "messageId": "m-1"},
                "subscription": "test"}
    url = f"http://127.0.0.1:{stack.state.ports['model_step']}/"
    push_token = as_forwarded_by_cloud_run(Issuer().token(PUSH_AUDIENCE, email=PUSH_EMAIL))
    async with httpx.AsyncClient() as client:
        refused = await client.post(url, json=envelope)
        forged = await client.post(url, json=envelope,
                                   headers={"Authorization": "Bearer abc.def.ghi"})
        counters_refused = await client.get(url)
        counters = await client.get(url, headers={"Authorization": f"Bearer {push_token}"})
    assert refused.status_code == forged.status_code == 401
    assert "push not authenticated" in refused.json()["error"]
    # Without the token a GET learns that the process is up, and nothing it counted.
    assert counters_refused.status_code == 200
    assert counters_refused.json() == {"status": "ok"}, "counters shown before any auth"
    assert counters.status_code == 200
    assert counters.json()["function"] == "model" and "firestore" in counters.json()

    # Both refusals are in the function's metrics, as 401 answers to pushes.
    def refusals(series: list[Series]) -> float:
        return sum(s.value for s in series if s.name == PUSH_ANSWERS
                   and s.attributes.get("function") == "model"
                   and s.attributes.get("status") == "401")

    assert refusals(await stack.settled_metrics(lambda s: refusals(s) >= 2)) == 2
    # The other step functions keep the default (no check in the app).
    tool = f"http://127.0.0.1:{stack.state.ports['tool_step']}/"
    async with httpx.AsyncClient() as client:
        assert (await client.post(tool, content=b"{not json")).status_code == 400
