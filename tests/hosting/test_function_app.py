"""``ackloop run`` serves a step function's module as functions-framework's HTTP routing did:
every path and method to the function, 404 for robots.txt and favicon.ico, 500 for an exception
the function lets out; a module without the function is refused before anything is served. A
combined service (``steps``, ``all``) routes ``/<kind>`` to that step function, the rest to the
API or a 404."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ackloop.hosting.function_app import (
    FunctionNotFound,
    combined_app,
    function_app,
    load_function,
)


async def _echo(request: Request) -> Response:
    if request.url.path == "/boom":
        raise RuntimeError("the function failed")
    body = await request.body()
    return PlainTextResponse(f"{request.method} {request.url.path} {body.decode()}")


def _client() -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=function_app(_echo)),
                             base_url="http://function")


@pytest.mark.parametrize(("method", "path"), [("POST", "/"), ("GET", "/"),
                                              ("POST", "/any/path"), ("PUT", "/x")])
async def test_every_path_and_method_reaches_the_function(method: str, path: str) -> None:
    async with _client() as client:
        response = await client.request(method, path, content=b"push")
    assert response.status_code == 200
    assert response.text == f"{method} {path} push"


@pytest.mark.parametrize("path", ["/robots.txt", "/favicon.ico"])
async def test_robots_and_favicon_are_not_found(path: str) -> None:
    async with _client() as client:
        assert (await client.get(path)).status_code == 404


async def test_an_exception_the_function_lets_out_is_a_500(
        caplog: pytest.LogCaptureFixture) -> None:
    async with _client() as client:
        response = await client.post("/boom")
    assert (response.status_code, response.text) == (500, "Internal Server Error")
    assert "the function failed" in caplog.text  # the traceback is logged


def test_a_module_is_loaded_with_its_neighbours_and_its_target_returned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.path", list(sys.path))
    (tmp_path / "helper_next_to_main.py").write_text("ANSWER = 'served'\n")
    source = tmp_path / "main.py"
    source.write_text("from helper_next_to_main import ANSWER\n\n"
                      "async def tool_step(request):\n    return ANSWER\n")
    assert load_function("tool_step", source).__name__ == "tool_step"
    with pytest.raises(FunctionNotFound, match="'model_step'"):
        load_function("model_step", source)


async def test_a_method_the_routes_do_not_take_is_405() -> None:
    async with _client() as client:
        response = await client.request("TRACE", "/")
    assert response.status_code == 405
    assert "POST" in response.headers["allow"]


async def test_robots_and_favicon_take_other_methods_to_the_function() -> None:
    async with _client() as client:
        response = await client.post("/robots.txt", content=b"push")
    assert (response.status_code, response.text) == (200, "POST /robots.txt push")


async def test_an_http_error_raised_inside_is_answered_with_its_status() -> None:
    async def slow(request: Request) -> Response:
        raise HTTPException(408, "too slow", headers={"Connection": "close"})

    transport = httpx.ASGITransport(app=function_app(slow))
    async with httpx.AsyncClient(transport=transport, base_url="http://function") as client:
        response = await client.post("/")
    assert (response.status_code, response.text) == (408, "too slow")
    assert response.headers["connection"] == "close"


async def test_the_lifespan_starts_and_stops() -> None:
    app = function_app(_echo)
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[dict[str, str]] = []

    async def receive() -> dict[str, str]:
        return incoming.pop(0)

    async def send(message: dict[str, str]) -> None:
        sent.append(message)

    await app({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)  # type: ignore[arg-type]
    assert [m["type"] for m in sent] == ["lifespan.startup.complete",
                                         "lifespan.shutdown.complete"]


def _kind(name: str) -> ASGIApp:
    async def step(request: Request) -> Response:
        return PlainTextResponse(f"{name} {request.method} {request.url.path}")

    return function_app(step)


async def _api(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        message = await receive()
        await send({"type": f"{message['type']}.complete"})
        return
    await PlainTextResponse(f"api {scope['path']}")(scope, receive, send)


STEPS = {"ingest": _kind("ingest"), "model_step": _kind("model_step")}


@pytest.mark.parametrize(("path", "with_api", "status", "text"), [
    ("/ingest", False, 200, "ingest POST /ingest"),
    ("/model_step", False, 200, "model_step POST /model_step"),
    ("/model_step/below", True, 200, "model_step POST /model_step/below"),
    ("/model_stepx", False, 404, "Not Found: this service serves /ingest, /model_step"),
    ("/tool_step", False, 404, "Not Found: this service serves /ingest, /model_step"),
    ("/runs", True, 200, "api /runs"),
    ("/", True, 200, "api /"),
    ("/model_stepx", True, 200, "api /model_stepx"),
])
async def test_a_combined_service_routes_by_the_step_kind_its_path_names(
        path: str, with_api: bool, status: int, text: str) -> None:
    app = combined_app(STEPS, _api if with_api else None)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://steps") as client:
        response = await client.post(path)
    assert (response.status_code, response.text) == (status, text)


async def test_a_combined_service_without_the_api_answers_its_root_with_what_it_serves() -> None:
    app = combined_app(STEPS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://steps") as client:
        response = await client.get("/")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "serves": ["/ingest", "/model_step"]}
