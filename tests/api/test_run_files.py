"""``GET /runs/{run_id}/files/{sha256}``: a file a run's question carried or its tool step
stored, for the run's owner only, and only the files the run names."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import httpx

from ackloop.api.app import create_app
from ackloop.api.files import question_files
from ackloop.config.settings import Settings
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import FilePart, InlineData, QueryMessage
from ackloop.engine.deps import Deps
from ackloop.model.scripted import ScriptedModel
from tests.api.test_auth import TOKEN
from tests.engine.test_tool_files import IMAGE, loop_of, png, script

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


PHOTO = png(20, 10)


async def test_a_file_the_question_carried_is_served_by_the_digest_its_uri_names() -> None:
    """The run's ``files`` names an inline file by the URI its bytes were stored under; the
    digest in that URI is what the route serves it by (the run inspector's link), beside the
    files its steps stored. A file the question passed by its own URI has no bytes here."""
    loop = loop_of(ScriptedModel(script))
    photo = FilePart(inline_data=InlineData(mime_type="image/png", display_name="photo.png",
                                            data=base64.b64encode(PHOTO).decode()))
    await loop.submit(QueryMessage(request_id="question-file", text="draw q3", files=[photo]))
    await loop.run_until_idle()
    run_id = run_id_for_request("question-file")
    deps = loop.deps

    async def engine() -> Deps:
        return deps

    run = await deps.store.runs.get_run(run_id)
    assert run is not None
    (part,) = run.files
    sha = hashlib.sha256(PHOTO).hexdigest()
    assert part["file_data"]["file_uri"].endswith(f"/files/{sha}-{len(PHOTO)}")
    app = create_app(Settings(), deps=engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://api") as client:
        listed = (await client.get(f"/runs/{run_id}")).json()["files"]
        got = await client.get(f"/runs/{run_id}/files/{sha}")
        tools = await client.get(f"/runs/{run_id}/files/{hashlib.sha256(IMAGE).hexdigest()}")
    assert listed == run.files
    assert got.status_code == 200, got.text
    assert got.content == PHOTO and got.headers["content-type"] == "image/png"
    assert got.headers["content-disposition"] == 'inline; filename="photo.png"'
    assert tools.status_code == 200 and tools.content == IMAGE  # the tool's file still served

    # Only the deployment's own stored files: a caller's URI (even one shaped like a stored
    # file's name) and a part that is no file_data are skipped.
    foreign = f"gs://someone-elses-bucket/files/{'0' * 64}-12"
    run = run.model_copy(update={"files": [
        {"file_data": {"file_uri": foreign, "mime_type": "image/png"}},
        {"text": "not a file"}, *run.files]})
    assert [(f.sha256, f.size, f.name, f.mime_type) for f in question_files(run, deps.files)] == [
        (sha, len(PHOTO), "photo.png", "image/png")]


PDF = b"%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n"
HTML = b"<html><script>alert(document.cookie)</script></html>"


async def test_any_name_and_any_bytes_are_served_over_http_as_safe_headers() -> None:
    """Over real HTTP (uvicorn): a name with CR/LF or outside Latin-1 still gets its answer,
    the name kept in ``filename*`` (RFC 6266/5987) beside an ASCII ``filename``; bytes that
    are not of the type declared (HTML said to be a PNG) are a download, never shown."""
    from tests.api.test_auth import serving

    def part(mime: str, name: str, data: bytes) -> FilePart:
        return FilePart(inline_data=InlineData(mime_type=mime, display_name=name,
                                               data=base64.b64encode(data).decode()))

    loop = loop_of(ScriptedModel(script))
    files = [part("image/png", "evil\r\nSet-Cookie: a=b.png", PHOTO),
             part("application/pdf", "履歴書.pdf", PDF),
             part("image/png", "cat.png", HTML)]
    await loop.submit(QueryMessage(request_id="hostile-names", text="draw q3", files=files))
    await loop.run_until_idle()
    run_id = run_id_for_request("hostile-names")
    deps = loop.deps

    async def engine() -> Deps:
        return deps

    async with serving(create_app(Settings(), deps=engine)) as url, \
            httpx.AsyncClient(base_url=url) as client:
        crlf, resume, fake = [await client.get(f"/runs/{run_id}/files/"
                                               f"{hashlib.sha256(data).hexdigest()}")
                              for data in (PHOTO, PDF, HTML)]
    assert crlf.status_code == 200 and crlf.content == PHOTO
    assert "set-cookie" not in crlf.headers
    assert crlf.headers["content-disposition"] == 'inline; filename="evilSet-Cookie: a=b.png"'
    assert resume.status_code == 200 and resume.content == PDF
    assert resume.headers["content-type"] == "application/pdf"
    assert resume.headers["content-disposition"] == (
        "inline; filename=\"___.pdf\"; filename*=UTF-8''%E5%B1%A5%E6%AD%B4%E6%9B%B8.pdf")
    assert fake.status_code == 200 and fake.content == HTML
    assert fake.headers["content-type"] == "application/octet-stream"
    assert fake.headers["content-disposition"] == 'attachment; filename="cat.png"'
    assert fake.headers["x-content-type-options"] == "nosniff"
