"""``GET /runs/{run_id}/files/{sha256}``: a file a run's tool step stored, for the run's owner
only, and only the files its steps recorded."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from tests.api.test_auth import TOKEN
from tests.engine.test_tool_files import IMAGE, loop_of, script

SECRET = b"another run's secret"
SECRET_SHA = hashlib.sha256(SECRET).hexdigest()


async def _finished_run() -> tuple[Deps, str]:
    loop = loop_of(ScriptedModel(script))
    await loop.submit(QueryMessage(request_id="files-api", text="draw q3"))
    await loop.run_until_idle()
    assert loop.answers[0].answer == "drawn"
    return loop.deps, run_id_for_request("files-api")


async def test_the_owner_gets_the_bytes_of_a_file_the_run_stored(tmp_path: Path) -> None:
    deps, run_id = await _finished_run()
    await deps.files.put(SECRET, "text/plain", name="other.txt")

    async def engine() -> Deps:
        return deps

    sha = hashlib.sha256(IMAGE).hexdigest()
    app = create_app(Settings(), deps=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        got = await client.get(f"/runs/{run_id}/files/{sha}")
        # Stored, but by no step of this run.
        other = await client.get(f"/runs/{run_id}/files/{SECRET_SHA}")
        bad = await client.get(f"/runs/{run_id}/files/not-a-digest")
        missing_run = await client.get(f"/runs/run-nope/files/{sha}")
        described = (await client.get("/openapi.json")).json()["paths"]
    assert got.status_code == 200 and got.content == IMAGE
    assert got.headers["content-type"] == "image/png"
    assert got.headers["content-disposition"] == 'inline; filename="chart.png"'
    assert got.headers["x-content-type-options"] == "nosniff"
    assert "sandbox" in got.headers["content-security-policy"]
    assert other.status_code == 404
    assert bad.status_code == 422 and missing_run.status_code == 404
    assert "/runs/{run_id}/files/{sha256}" in described

    # Another caller (here: the bearer token's) gets 404, as for a run that does not exist.
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    guarded = create_app(Settings(api_auth="bearer", api_bearer_token_file=str(token_file)),
                         deps=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guarded),
                                 base_url="http://api") as client:
        anonymous = await client.get(f"/runs/{run_id}/files/{sha}")
        stranger = await client.get(f"/runs/{run_id}/files/{sha}",
                                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert anonymous.status_code == 401
    assert stranger.status_code == 404 and stranger.json()["code"] == "not_found"
