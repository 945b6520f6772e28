"""``ackloop run`` serves a step function's module as functions-framework's HTTP routing did:
every path and method to the function, 404 for robots.txt and favicon.ico, 500 for an exception
the function lets out; a module without the function is refused before anything is served."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from ackloop.function_app import FunctionNotFound, function_app, load_function


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
