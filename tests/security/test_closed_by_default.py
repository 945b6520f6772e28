"""The API serves nothing that loads a third party's scripts unless asked (S1): /docs and
/redoc, whose pages load Swagger UI's and ReDoc's scripts from a CDN on the run inspector's
origin, are 404 unless ACKLOOP_API_DOCS is on; /openapi.json, which runs nothing, stays."""

from __future__ import annotations

import httpx

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.engine.deps import Deps


async def _no_deps() -> Deps:
    raise AssertionError("these requests never reach the engine")


async def pages(settings: Settings) -> dict[str, tuple[int, str]]:
    app = create_app(settings, deps=_no_deps)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
        return {path: ((r := await client.get(path)).status_code, r.text)
                for path in ("/docs", "/redoc", "/openapi.json")}


async def test_the_cdn_pages_are_off_unless_asked_for() -> None:
    default = await pages(Settings())
    assert default["/docs"][0] == 404 and default["/redoc"][0] == 404
    assert default["/openapi.json"][0] == 200 and '"/runs"' in default["/openapi.json"][1]
    assert Settings().api_docs is False

    asked = await pages(Settings(api_docs=True))
    assert asked["/docs"][0] == 200 and "swagger-ui" in asked["/docs"][1]
    assert asked["/redoc"][0] == 200
