"""Only the tool step runs tools, the users of the process's HTTP client: every other service
builds that client's connection pool (an import of httpcore, a load of the CA bundle) on its
first request, and the client is otherwise the same."""

from __future__ import annotations

import httpx
import pytest

from ackloop.config.settings import Settings
from ackloop.hosting import runtime


def _settings() -> Settings:
    return Settings.model_validate({"project_id": "p", "tool_timeout_seconds": 7.0})


@pytest.mark.parametrize(("target", "deferred"), [("tool_step", False), (None, False),
                                                  ("ingest", True), ("model_step", True),
                                                  ("dead_letter", True), ("api", True)])
async def test_only_the_tool_step_builds_its_http_pool_before_serving(target: str | None,
                                                                      deferred: bool) -> None:
    async with runtime.build_http(_settings(), target) as client:
        transport = client._transport
        if deferred:
            assert isinstance(transport, runtime.PoolOnFirstUse) and not transport.built
        else:
            assert isinstance(transport, httpx.AsyncHTTPTransport)
        assert client.timeout == httpx.Timeout(7.0, connect=5.0)
        assert client.follow_redirects
        assert client.headers["User-Agent"].startswith("ackloop/")


async def test_a_deferred_pool_is_built_once_on_the_first_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[httpx.MockTransport] = []

    def pool() -> httpx.MockTransport:
        built.append(httpx.MockTransport(lambda request: httpx.Response(200,
                                                                        text=request.url.path)))
        return built[-1]

    monkeypatch.setattr(httpx, "AsyncHTTPTransport", pool)
    async with runtime.build_http(_settings(), "ingest") as client:
        assert built == []
        assert (await client.get("http://tool.test/a")).text == "/a"
        assert (await client.get("http://tool.test/b")).text == "/b"
    assert len(built) == 1


async def test_a_deferred_pool_never_used_closes_without_being_built() -> None:
    client = runtime.build_http(_settings(), "model_step")
    await client.aclose()
    assert isinstance(client._transport, runtime.PoolOnFirstUse)
    assert not client._transport.built
