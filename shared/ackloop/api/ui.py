"""The run inspector's page and assets at ``/ui``: plain files shipped in the package.

The page is served to anyone who reaches the app: it holds no data, and the person who opens
it gives it the API's bearer token, which it sends on every API call. Nothing is loaded from
anywhere but this service (the Content-Security-Policy says so to the browser), so it works
offline and behind a firewall. The names carry no version, so the browser revalidates each
file (``no-cache`` with an ETag) and sees a new release at once, for a 304 otherwise.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from ackloop.api.errors import ApiError

SCRIPTS = ("app.js", "ui.js", "runs.js", "run.js", "live.js", "files.js", "chat.js",
           "letters.js", "evals.js", "schedules.js")
"""The page's ES modules: ``app.js`` routes, each view is a module of its own."""
CONTENT_TYPES = {
    "index.html": "text/html; charset=utf-8",
    **dict.fromkeys(SCRIPTS, "text/javascript; charset=utf-8"),
    "style.css": "text/css; charset=utf-8",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data: blob:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str


@cache
def asset(name: str) -> Asset:
    """One of the page's files, read from the package once per process."""
    body = resources.files("ackloop.api").joinpath("ui_assets", name).read_bytes()
    etag = f'"{hashlib.sha256(body).hexdigest()[:32]}"'
    return Asset(body, CONTENT_TYPES[name], etag)


def serve(request: Request, name: str) -> Response:
    if name not in CONTENT_TYPES:
        raise ApiError(404, "not_found", f"no file {name} in the inspector")
    found = asset(name)
    headers = {"ETag": found.etag, "Cache-Control": "no-cache", **SECURITY_HEADERS}
    if request.headers.get("if-none-match") == found.etag:
        return Response(status_code=304, headers=headers)
    return Response(found.body, media_type=found.content_type, headers=headers)


@router.get("/ui")
async def index(request: Request) -> Response:
    return serve(request, "index.html")


@router.get("/ui/")
async def index_slash() -> Response:
    return RedirectResponse("/ui", status_code=308)


@router.get("/ui/{name}")
async def file(request: Request, name: str) -> Response:
    return serve(request, name)
