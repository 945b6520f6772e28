"""Files a conversation carries (a query's attachments, a tool's output), kept out of Firestore.

A Firestore document holds at most 1 MiB, and a transcript chunk a quarter of that: a file's
bytes never go into one. They are put in a :class:`FileStore` (Cloud Storage in a deployment,
its emulator on the local stack, memory in tests) under a name derived from their digest and
size (:func:`object_name`), and the transcript holds a Gemini ``file_data`` part that names
them (:func:`stored_part`). A model step turns those parts back into what Gemini is sent
(:func:`for_request`): the bytes inline up to a limit, else the URI.

A query's files (:class:`ackloop.domain.wire.FilePart`: inline base64 bytes, or a caller's
``gs://``/``https://`` URI under a prefix the deployment allows: :mod:`ackloop.config.file_uris`)
are checked against :class:`FileLimits` and the accepted types (:func:`plan_query_files`), and
their bytes stored (:meth:`QueryFiles.store`) once nothing else can refuse the query, just
before its run is created; the run keeps only the ``file_data`` parts. A refusal is a
:class:`FileRefused` whose reason says which rule it broke (the HTTP API answers 413, 415 or
422 for it; a query on the topic is acknowledged as poison).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ackloop.config import file_uris
from ackloop.domain.errors import PermanentError
from ackloop.domain.jsondict import JsonDict
from ackloop.files import gate

if TYPE_CHECKING:
    from ackloop.config.settings import Settings
    from ackloop.domain.wire import FilePart

ACCEPTED_TYPES = frozenset({
    "image/png", "image/jpeg", "image/webp", "image/gif",
    "application/pdf",
    "audio/wav", "audio/mp3", "audio/mpeg", "audio/aac", "audio/ogg", "audio/flac",
    "audio/aiff",
})
"""The MIME types a query's file may have (inline or by URI): images, PDF, audio."""

URI_SCHEMES = ("gs://", "https://")
"""What a caller's file URI may start with."""

INLINE_FILE_BYTES = 7 * 1024 * 1024
"""The default largest stored file sent to Gemini inline (``files_inline_bytes``)."""
INLINE_REQUEST_BYTES = 14 * 1024 * 1024
"""The most file bytes one request sends inline (base64 makes them 4/3 larger: about 18.7 MB
of Gemini's 20 MB inline request limit, the rest left to the text). Files are inlined newest
first; one that would pass this goes as its URI."""

TOO_LARGE = "file_too_large"
TYPE_NOT_ACCEPTED = "file_type_not_accepted"
INVALID = "invalid_file"
URI_NOT_ALLOWED = "file_uri_not_allowed"
HTTP_STATUS = {TOO_LARGE: 413, TYPE_NOT_ACCEPTED: 415, INVALID: 422}
"""The HTTP status each refusal answers on the API."""

_STORED_NAME = re.compile(r"/files/([0-9a-f]{64})-(\d+)$")


class StoredFile(BaseModel):
    """A file's bytes as stored: where, what kind, how big, and their SHA-256."""

    model_config = ConfigDict(frozen=True)

    uri: str
    mime_type: str
    size: int
    sha256: str
    name: str | None = None


@runtime_checkable
class FileStore(Protocol):
    """Where file bytes live. ``put`` is idempotent: the same bytes get the same URI
    (:meth:`uri_of`, known before they are put)."""

    bucket: str

    def uri_of(self, data: bytes) -> str:
        """The URI ``put`` stores ``data`` under."""
        ...

    async def put(self, data: bytes, mime_type: str, *, name: str | None = None) -> StoredFile: ...

    async def get(self, uri: str) -> bytes: ...

    def owns(self, uri: str) -> bool:
        """Whether ``uri`` names a file of this store."""
        ...


def object_name(data: bytes) -> str:
    """The name a file's bytes are stored under: their digest and size
    (``files/<sha256>-<size>``), so a redelivered step that stores them again writes the same
    object, and a model step knows a stored file's size from its URI alone."""
    return f"files/{hashlib.sha256(data).hexdigest()}-{len(data)}"


def stored_size(uri: str) -> int | None:
    """The size a stored file's URI names (:func:`object_name`), None for any other URI."""
    match = _STORED_NAME.search(uri)
    return int(match.group(2)) if match else None


def stored_digest(uri: str) -> str | None:
    """The SHA-256 a stored file's URI names (:func:`object_name`), None for any other URI."""
    match = _STORED_NAME.search(uri)
    return match.group(1) if match else None


def stored_file(uri: str, data: bytes, mime_type: str, name: str | None) -> StoredFile:
    return StoredFile(uri=uri, mime_type=mime_type, size=len(data),
                      sha256=hashlib.sha256(data).hexdigest(), name=name)


class MemoryFileStore:
    """Files in this process's memory (tests, and the in-process engine)."""

    def __init__(self, bucket: str = "ackloop-files", *,
                 inline_bytes: int = INLINE_FILE_BYTES) -> None:
        self.bucket = bucket
        self.inline_bytes = inline_bytes
        self.objects: dict[str, bytes] = {}

    def uri_of(self, data: bytes) -> str:
        return f"mem://{self.bucket}/{object_name(data)}"

    async def put(self, data: bytes, mime_type: str, *, name: str | None = None) -> StoredFile:
        uri = self.uri_of(data)
        self.objects[uri] = bytes(data)
        return stored_file(uri, data, mime_type, name)

    async def get(self, uri: str) -> bytes:
        try:
            return self.objects[uri]
        except KeyError:
            raise FileNotFoundError(uri) from None

    def owns(self, uri: str) -> bool:
        return uri.startswith(f"mem://{self.bucket}/")


def stored_part(stored: StoredFile) -> JsonDict:
    """The transcript's part for a stored file: Gemini's ``file_data`` naming it."""
    data: JsonDict = {"file_uri": stored.uri, "mime_type": stored.mime_type}
    if stored.name:
        data["display_name"] = stored.name
    return {"file_data": data}


# -- a query's files -------------------------------------------------------------------------


class FileRefused(PermanentError):
    """A query's file breaks a rule: ``reason`` is :data:`TOO_LARGE`, :data:`TYPE_NOT_ACCEPTED`
    or :data:`INVALID`, and the message says what to change."""

    @property
    def http_status(self) -> int:
        return HTTP_STATUS.get(self.reason, 422)


@dataclass(frozen=True)
class FileLimits:
    """How many files a query may carry, how large its inline ones may be, and the prefixes
    its URIs may lie under (:mod:`ackloop.config.file_uris`; none: inline files only)."""

    max_file_bytes: int = 7 * 1024 * 1024
    max_query_bytes: int = 14 * 1024 * 1024
    max_count: int = 10
    allowed_uris: tuple[str, ...] = field(default=())

    @classmethod
    def from_settings(cls, settings: Settings) -> FileLimits:
        return cls(settings.files_max_file_bytes, settings.files_max_query_bytes,
                   settings.files_max_count, file_uris.parse_allowed(settings.files_allowed_uris))


def _mib(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MiB ({size} bytes)"


def _decoded(data: str, where: str, limits: FileLimits) -> bytes:
    """The bytes of an inline file's base64 text (standard or URL-safe alphabet; whitespace
    and missing padding tolerated), refused when too large before it is decoded."""
    text = "".join(data.split())
    if len(text) * 3 // 4 > limits.max_file_bytes + 2:
        raise FileRefused(f"{where} is about {_mib(len(text) * 3 // 4)}; a file may be at most "
                          f"{_mib(limits.max_file_bytes)} inline: send a smaller file, or a "
                          "larger one as a gs:// or https:// file_uri", reason=TOO_LARGE)
    text = text.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise FileRefused(f"{where}.data is not valid base64 ({exc}): encode the file's bytes "
                          "in base64 (RFC 4648)", reason=INVALID) from exc
    if not raw:
        raise FileRefused(f"{where}.data is empty: send the file's bytes", reason=INVALID)
    if len(raw) > limits.max_file_bytes:
        raise FileRefused(f"{where} is {_mib(len(raw))}; a file may be at most "
                          f"{_mib(limits.max_file_bytes)} inline: send a smaller file, or a "
                          "larger one as a gs:// or https:// file_uri", reason=TOO_LARGE)
    return raw


def _check_type(mime_type: str, where: str) -> None:
    if mime_type.lower() not in ACCEPTED_TYPES:
        raise FileRefused(f"{where}.mime_type {mime_type!r} is not accepted; accepted: "
                          f"{', '.join(sorted(ACCEPTED_TYPES))}", reason=TYPE_NOT_ACCEPTED)


def _check_uri(uri: str, where: str, store: FileStore | None, limits: FileLimits) -> None:
    if store is not None and store.owns(uri):
        raise FileRefused(f"{where}.file_uri names this deployment's own file store: send the "
                          "file's bytes as inline_data instead", reason=URI_NOT_ALLOWED)
    if not uri.startswith(URI_SCHEMES) or any(c.isspace() for c in uri):
        raise FileRefused(f"{where}.file_uri {uri[:200]!r} is not a gs:// or https:// URI: "
                          "pass a Cloud Storage object (gs://bucket/object) or an https:// URL, "
                          "or send the bytes as inline_data", reason=INVALID)
    rest = uri.split("://", 1)[1]
    host, _, path = rest.partition("/")
    if not host or (uri.startswith("gs://") and not path):
        raise FileRefused(f"{where}.file_uri {uri[:200]!r} names no object: use "
                          "gs://bucket/object or https://host/path", reason=INVALID)
    why = file_uris.refusal(uri, limits.allowed_uris, store.bucket if store is not None else None)
    if why is not None:
        raise FileRefused(f"{where}.file_uri {uri[:200]!r} {why}", reason=URI_NOT_ALLOWED)


def check_query_files(files: Sequence[FilePart], limits: FileLimits,
                      store: FileStore | None = None) -> list[bytes | None]:
    """Check a query's files; return each inline file's bytes (None for a URI). Raises
    :class:`FileRefused` for the first rule broken, before anything is stored."""
    if len(files) > limits.max_count:
        raise FileRefused(f"the query has {len(files)} files; at most {limits.max_count}: send "
                          "fewer files", reason=TOO_LARGE)
    decoded: list[bytes | None] = []
    total = 0
    for index, part in enumerate(files):
        where = f"files[{index}]"
        if part.inline_data is not None:
            _check_type(part.inline_data.mime_type, f"{where}.inline_data")
            raw = _decoded(part.inline_data.data, f"{where}.inline_data", limits)
            total += len(raw)
            if total > limits.max_query_bytes:
                raise FileRefused(f"the query's inline files take more than "
                                  f"{_mib(limits.max_query_bytes)} together: send fewer or "
                                  "smaller files, or pass some as gs:// or https:// file_uri",
                                  reason=TOO_LARGE)
            decoded.append(raw)
        else:
            assert part.file_data is not None
            _check_type(part.file_data.mime_type, f"{where}.file_data")
            _check_uri(part.file_data.file_uri, f"{where}.file_data", store, limits)
            decoded.append(None)
    return decoded


@dataclass(frozen=True)
class QueryFiles:
    """A query's files once checked: ``parts``, the ``file_data`` parts its run keeps (an
    inline file's URI is where :meth:`store` puts its bytes), and nothing stored yet."""

    parts: list[JsonDict]
    inline: list[tuple[bytes, str, str | None]]
    """Each inline file's bytes, MIME type and name, to store."""
    store_: FileStore

    async def store(self) -> None:
        """Put the inline files' bytes in the file store (idempotent: the same objects)."""
        await asyncio.gather(*(self.store_.put(raw, mime, name=name)
                               for raw, mime, name in self.inline))


def plan_query_files(store: FileStore, files: Sequence[FilePart], limits: FileLimits
                     ) -> QueryFiles:
    """A query's files as the run keeps them: ``file_data`` parts, an inline file's naming
    where its bytes are to be stored, a caller's URI as given. Stores nothing: the caller puts
    the bytes (:meth:`QueryFiles.store`) once nothing else can refuse the query. Raises
    :class:`FileRefused` when a file breaks a rule."""
    parts: list[JsonDict] = []
    inline: list[tuple[bytes, str, str | None]] = []
    for part, raw in zip(files, check_query_files(files, limits, store), strict=True):
        if raw is not None:
            assert part.inline_data is not None
            mime, name = part.inline_data.mime_type.lower(), part.inline_data.display_name
            inline.append((raw, mime, name))
            parts.append(stored_part(StoredFile(
                uri=store.uri_of(raw), mime_type=mime, size=len(raw), sha256="", name=name)))
            continue
        assert part.file_data is not None
        given: JsonDict = {"file_uri": part.file_data.file_uri,
                           "mime_type": part.file_data.mime_type.lower()}
        if part.file_data.display_name:
            given["display_name"] = part.file_data.display_name
        parts.append({"file_data": given})
    return QueryFiles(parts, inline, store)


# -- what the model is sent ------------------------------------------------------------------


def _sendable(part: JsonDict) -> JsonDict:
    """``part`` as Gemini accepts it at the top level of a content: a file part without the
    name ackloop keeps with it (the Gemini Developer API refuses ``display_name`` there; inside
    a function response it stays: the response refers to its parts by it)."""
    for key in ("file_data", "inline_data"):
        body = part.get(key)
        if isinstance(body, dict) and "display_name" in body:
            return {**part, key: {k: v for k, v in body.items() if k != "display_name"}}
    return part


Slot = tuple[int, int, int | None]
"""Where a part is: its content, its place there, and its place in that part's function
response (None: the part itself)."""


def _file_parts(contents: list[JsonDict]) -> list[tuple[Slot, JsonDict]]:
    """Every ``file_data`` part, newest content first: the contents' own parts, and the media
    parts of their function responses."""
    found: list[tuple[Slot, JsonDict]] = []
    for i in range(len(contents) - 1, -1, -1):
        for j, part in enumerate(contents[i].get("parts") or []):
            if not isinstance(part, dict):
                continue
            if isinstance(body := part.get("file_data"), dict):
                found.append(((i, j, None), body))
            response = part.get("function_response")
            nested = response.get("parts") if isinstance(response, dict) else None
            for k, inner in enumerate(nested if isinstance(nested, list) else []):
                if isinstance(inner, dict) and isinstance(body := inner.get("file_data"), dict):
                    found.append(((i, j, k), body))
    return found


async def for_request(store: FileStore, contents: list[JsonDict]) -> list[JsonDict]:
    """``contents`` as Gemini is sent them: a ``file_data`` part (a content's own, or a media
    part of a function response) naming a file of ``store`` whose size (from its name) is at
    most the store's ``inline_bytes`` becomes ``inline_data`` with its bytes, while the
    request's inline files stay within :data:`INLINE_REQUEST_BYTES` (the newest first); a
    larger one stays ``file_data`` with its URI, as does a caller's URI. A stored file that is
    gone (past its retention) becomes a text part saying so (in a function response, its
    ``file_data`` stays). A content's own file parts lose their ``display_name``.

    Deterministic, so a redelivered step sends the same bytes: the choice depends only on the
    contents, and a stored file's bytes never change (their name is their digest, checked on
    read). Reads only the file store, never Firestore; contents without file parts are
    returned as they are. A request inlining more than :data:`gate.LARGE_INLINE_BYTES` first
    takes a slot of its process (:func:`gate.hold`: it may wait, then raise retryable)."""
    found = _file_parts(contents)
    if not found:
        return contents
    limit = int(getattr(store, "inline_bytes", INLINE_FILE_BYTES))
    budget = INLINE_REQUEST_BYTES
    inline: dict[Slot, str] = {}
    for slot, body in found:
        uri = body.get("file_uri")
        if not isinstance(uri, str) or not store.owns(uri):
            continue
        size = stored_size(uri)
        if size is not None and size <= limit and size <= budget:
            inline[slot] = uri
            budget -= size
    await gate.hold(INLINE_REQUEST_BYTES - budget)  # a large request waits for a slot
    uris = sorted(set(inline.values()))
    fetched = dict(zip(uris, await asyncio.gather(*(_read(store, u) for u in uris)),
                       strict=True))

    def inlined(slot: Slot, part: JsonDict) -> JsonDict | None:
        """The part with its stored file's bytes, None when the file is gone."""
        uri = inline[slot]
        data, body = fetched[uri], part["file_data"]
        if data is None:
            return None
        blob: JsonDict = {"mime_type": body.get("mime_type") or "application/octet-stream",
                          "data": base64.b64encode(data).decode("ascii")}
        if slot[2] is not None and body.get("display_name"):
            blob["display_name"] = body["display_name"]
        return {"inline_data": blob}

    out: list[JsonDict] = []
    for i, content in enumerate(contents):
        parts: list[JsonDict] = []
        for j, part in enumerate(content.get("parts") or []):
            if not isinstance(part, dict):
                parts.append(part)
                continue
            if (i, j, None) in inline:
                sent = inlined((i, j, None), part)
                uri, mime = inline[(i, j, None)], part["file_data"].get("mime_type")
                parts.append(sent if sent is not None else
                             {"text": f"(the file {uri} ({mime}) is no longer stored)"})
                continue
            response = part.get("function_response")
            nested = response.get("parts") if isinstance(response, dict) else None
            if isinstance(response, dict) and isinstance(nested, list) and any(
                    (i, j, k) in inline for k in range(len(nested))):
                media = [(inlined((i, j, k), inner) or inner) if (i, j, k) in inline else inner
                         for k, inner in enumerate(nested)]
                part = {**part, "function_response": {**response, "parts": media}}
            parts.append(_sendable(part))
        out.append({**content, "parts": parts})
    return out


async def _read(store: FileStore, uri: str) -> bytes | None:
    """A stored file's bytes, checked against the digest its name carries; None when gone."""
    try:
        data = await store.get(uri)
    except FileNotFoundError:
        return None
    match = _STORED_NAME.search(uri)
    if match and hashlib.sha256(data).hexdigest() != match.group(1):
        raise PermanentError(f"the stored file {uri} does not match its digest",
                             reason="file_corrupt")
    return data
