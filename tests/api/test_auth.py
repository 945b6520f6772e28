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
from ackloop.engine.deps import Deps
from ackloop.http_push import authenticate_push
from ackloop.settings import Settings
from tests.api.tokens_support import Issuer
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


def _push_app(settings: Settings, issuer: Issuer) -> Starlette:
    async def endpoint(request: Request) -> Response:
        refused = await authenticate_push(settings, request, issuer.verifier())
        return Response(refused or "", status_code=401 if refused else 204)

    return Starlette(routes=[Route("/", endpoint, methods=["POST"])])


async def test_push_oidc_token_audience_defaults_to_the_pushed_url() -> None:
    issuer = Issuer()
    email = "push@proj.iam.gserviceaccount.com"
    settings = Settings(push_auth="oidc", push_auth_email=email)
    async with serving(_push_app(settings, issuer)) as url:
        audience = url.replace("http://", "https://")
        async with httpx.AsyncClient(base_url=url) as client:
            async def push(token: str | None) -> int:
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                return (await client.post("/", json={}, headers=headers)).status_code

            assert await push(issuer.token(audience, email=email)) == 204
            assert await push(issuer.token(audience + "/", email=email)) == 204
            assert await push(None) == 401
            assert await push(issuer.token(audience, email="other@example.com")) == 401
            assert await push(issuer.token("https://another-service.run.app", email=email)) == 401
    off = Settings()
    async with serving(_push_app(off, issuer)) as url, httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/", json={})).status_code == 204


@pytest.mark.emulator
@pytest.mark.slow
async def test_step_function_refuses_unauthenticated_pushes_when_configured(
    fresh_stack: Callable[..., RunningStack],
) -> None:
    stack = fresh_stack(service_env={"model_step": {"ACKLOOP_PUSH_AUTH": "oidc"}})
    data = json.dumps({"v": 1, "kind": "model", "run_id": "run-x", "turn": 0}).encode()
    envelope = {"message": {"data": base64.b64encode(data).decode(), "messageId": "m-1"},
                "subscription": "test"}
    url = f"http://127.0.0.1:{stack.state.ports['model_step']}/"
    async with httpx.AsyncClient() as client:
        refused = await client.post(url, json=envelope)
        forged = await client.post(url, json=envelope,
                                   headers={"Authorization": "Bearer abc.def.ghi"})
    assert refused.status_code == forged.status_code == 401
    assert "push not authenticated" in refused.json()["error"]
    assert stack.service("model_step")["rejected"] == {"unauthenticated": 2}
    # The other step functions keep the default (no check in the app).
    tool = f"http://127.0.0.1:{stack.state.ports['tool_step']}/"
    async with httpx.AsyncClient() as client:
        assert (await client.post(tool, content=b"{not json")).status_code == 400

