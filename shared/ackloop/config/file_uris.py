"""Which caller file URIs a deployment passes on to Gemini (``ACKLOOP_FILES_ALLOWED_URIS``).

A ``file_data`` part goes to Gemini as its URI, and on Vertex AI Gemini reads a ``gs://`` URI
as the deployment's service identity: whatever that identity may read, a caller could have
read back through the model. So a caller's URI must lie under one of the prefixes the
deployment lists (``gs://bucket[/prefix]`` or ``https://host[/prefix]``), matched on a path
boundary (``gs://media`` allows ``gs://media/a.png``, not ``gs://media-private/a.png``); with
none listed (the default), a query takes files inline only.

The deployment's own files bucket is refused even when a listed prefix covers it, in every
form that names it (``gs://``, ``https://storage.googleapis.com/``,
``https://storage.cloud.google.com/``, ``https://<bucket>.storage.googleapis.com/``): only the
engine writes there, under names derived from the bytes, and a caller who names an object in
it would reference a file someone else uploaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote

SETTING = "ACKLOOP_FILES_ALLOWED_URIS"
SCHEMES = ("gs://", "https://")


def parse_allowed(value: str | None) -> tuple[str, ...]:
    """The prefixes a comma-separated setting lists, each without a trailing ``/``. Raises
    ``ValueError`` for one that is not ``gs://bucket[/prefix]`` or ``https://host[/prefix]``."""
    prefixes: list[str] = []
    for entry in (e.strip() for e in (value or "").split(",")):
        if not entry:
            continue
        rest = entry.split("://", 1)[1] if entry.startswith(SCHEMES) else ""
        host = rest.split("/", 1)[0]
        if not host or any(c.isspace() or c in "@\\%?#" for c in entry):
            raise ValueError(f"{SETTING}: {entry!r} is not gs://bucket[/prefix] or "
                             "https://host[/prefix]")
        prefixes.append(entry.rstrip("/"))
    return tuple(prefixes)


def files_bucket_forms(bucket: str) -> tuple[str, ...]:
    """Every URI prefix that names an object of the Cloud Storage bucket ``bucket``."""
    return (f"gs://{bucket}/", f"https://storage.googleapis.com/{bucket}/",
            f"https://storage.cloud.google.com/{bucket}/",
            f"https://{bucket}.storage.googleapis.com/")


def _under(uri: str, prefix: str) -> bool:
    """Whether ``uri`` lies under ``prefix`` on a path boundary (the scheme and host compared
    without regard to case)."""
    scheme, _, rest = prefix.partition("://")
    host, slash, path = rest.partition("/")
    head = f"{scheme}://{host}".lower()
    if uri[:len(head)].lower() != head:
        return False
    tail, want = uri[len(head):], f"/{path}" if slash else ""
    return tail == want or tail.startswith(want + "/")


def _forms(uri: str) -> set[str]:
    """``uri`` as given and percent-decoded (a server decodes it before it reads the path)."""
    return {uri, unquote(uri)}


def _has_dot_segment(uri: str) -> bool:
    path = uri.split("://", 1)[-1].split("?", 1)[0].split("#", 1)[0]
    return any(seg in {".", ".."} for seg in path.replace("\\", "/").split("/"))


def refusal(uri: str, allowed: Iterable[str], bucket: str | None) -> str | None:
    """Why ``uri`` may not be passed on (None: it may): it names the files ``bucket``, or lies
    under none of the ``allowed`` prefixes (as given and percent-decoded, with no ``.`` or
    ``..`` segment that would step out of one)."""
    allowed = tuple(allowed)
    forms = _forms(uri)
    if bucket and any(f.lower().startswith(files_bucket_forms(bucket)) for f in forms):
        return ("names this deployment's own files bucket, which only the engine writes: "
                "send the file's bytes as inline_data instead")
    if any(_has_dot_segment(f) for f in forms) or not all(
            any(_under(f, p) for p in allowed) for f in forms):
        if not allowed:
            return (f"is not accepted: this deployment reads no caller file URIs ({SETTING} "
                    "lists none): send the file's bytes as inline_data")
        return (f"is not under a prefix this deployment reads from; allowed: "
                f"{', '.join(p + '/' for p in allowed)} ({SETTING})")
    return None
