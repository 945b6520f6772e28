"""Files a conversation carries (a query's attachments, a tool's output), kept out of Firestore.

A Firestore document holds at most 1 MiB, and a transcript chunk a quarter of that: a file's
bytes never go into one. They are put in a :class:`FileStore` (Cloud Storage in a deployment,
its emulator on the local stack, memory in tests) under a name derived from their digest, and
the transcript holds a Gemini ``file_data`` part that names them (:func:`stored_part`). A model
step turns those parts back into what Gemini is sent (:func:`for_request`).
"""

from __future__ import annotations

import hashlib
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from ackloop.jsondict import JsonDict


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
    """Where file bytes live. ``put`` is idempotent: the same bytes get the same URI."""

    async def put(self, data: bytes, mime_type: str, *, name: str | None = None) -> StoredFile: ...

    async def get(self, uri: str) -> bytes: ...

    def owns(self, uri: str) -> bool:
        """Whether ``uri`` names a file of this store."""
        ...


def object_name(data: bytes) -> str:
    """The name a file's bytes are stored under: their digest, so a redelivered step that
    stores them again writes the same object."""
    return f"files/{hashlib.sha256(data).hexdigest()}"


class MemoryFileStore:
    """Files in this process's memory (tests, and the in-process engine)."""

    def __init__(self, bucket: str = "ackloop-files") -> None:
        self.bucket = bucket
        self.objects: dict[str, bytes] = {}

    async def put(self, data: bytes, mime_type: str, *, name: str | None = None) -> StoredFile:
        uri = f"mem://{self.bucket}/{object_name(data)}"
        self.objects[uri] = bytes(data)
        return StoredFile(uri=uri, mime_type=mime_type, size=len(data),
                          sha256=hashlib.sha256(data).hexdigest(), name=name)

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


async def for_request(store: FileStore, contents: list[JsonDict]) -> list[JsonDict]:
    """``contents`` as Gemini is sent them: parts that name this store's files become what
    the model can read. Deterministic, so a redelivered step sends the same bytes.

    (Skeleton: contents unchanged until the files work lands.)"""
    return contents
