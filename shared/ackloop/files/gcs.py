"""The file store of a deployment: a Cloud Storage bucket (``ACKLOOP_FILES_BUCKET``).

Objects are named by their digest and size (:func:`ackloop.files.object_name`), so a put is
idempotent and an object never changes. The client is google-cloud-storage's, created on first
use (its import and credentials stay out of a cold start that stores no file) and called in a
worker thread. ``STORAGE_EMULATOR_HOST`` points it at an emulator (the local stack's
gcp-storage-emulator), with anonymous credentials.

Errors: a missing object is ``FileNotFoundError``; throttling, 5xx and connection errors are
:class:`~ackloop.domain.errors.RetryableError` (the delivery is redelivered); anything else (a
missing
bucket, no permission) is :class:`~ackloop.domain.errors.PermanentError`.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from typing import Any

from ackloop.domain.errors import PermanentError, RetryableError
from ackloop.files import INLINE_FILE_BYTES, StoredFile, object_name, stored_file

CACHE_BYTES = 64 * 1024 * 1024
"""Bytes of recently read files kept in the process: a run's model steps send its files again
at every turn, and an object never changes."""


class GcsFileStore:
    """Files in a Cloud Storage bucket, as ``gs://<bucket>/files/<sha256>-<size>``."""

    def __init__(self, bucket: str, *, project: str | None = None,
                 inline_bytes: int = INLINE_FILE_BYTES, cache_bytes: int = CACHE_BYTES) -> None:
        if not bucket or "/" in bucket:
            raise ValueError(f"not a bucket name: {bucket!r}")
        self.bucket = bucket
        self.project = project
        self.inline_bytes = inline_bytes
        self.cache_bytes = cache_bytes
        self._client: Any = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached = 0

    def owns(self, uri: str) -> bool:
        return uri.startswith(f"gs://{self.bucket}/")

    def uri_of(self, data: bytes) -> str:
        return f"gs://{self.bucket}/{object_name(data)}"

    async def put(self, data: bytes, mime_type: str, *, name: str | None = None) -> StoredFile:
        uri = self.uri_of(data)
        await asyncio.to_thread(self._upload, uri[len(f"gs://{self.bucket}/"):], data, mime_type)
        return stored_file(uri, data, mime_type, name)

    async def get(self, uri: str) -> bytes:
        if not self.owns(uri):
            raise FileNotFoundError(uri)
        with self._lock:
            if (hit := self._cache.get(uri)) is not None:
                self._cache.move_to_end(uri)
                return hit
        data = await asyncio.to_thread(self._download, uri[len(f"gs://{self.bucket}/"):])
        self._remember(uri, data)
        return data

    def _remember(self, uri: str, data: bytes) -> None:
        if len(data) > self.cache_bytes // 4:
            return
        with self._lock:
            if uri not in self._cache:
                self._cache[uri] = data
                self._cached += len(data)
            while self._cached > self.cache_bytes and self._cache:
                _, dropped = self._cache.popitem(last=False)
                self._cached -= len(dropped)

    # -- in a worker thread -------------------------------------------------------------------

    def _blob(self, key: str) -> Any:
        with self._lock:
            if self._client is None:
                self._client = _client(self.project)
            client = self._client
        return client.bucket(self.bucket).blob(key)

    def _upload(self, key: str, data: bytes, mime_type: str) -> None:
        blob = self._blob(key)
        try:
            blob.upload_from_string(data, content_type=mime_type)
        except Exception as exc:
            raise _translated(exc, f"storing gs://{self.bucket}/{key}") from exc

    def _download(self, key: str) -> bytes:
        blob = self._blob(key)
        try:
            data: bytes = blob.download_as_bytes()
        except Exception as exc:
            error = _translated(exc, f"reading gs://{self.bucket}/{key}")
            if isinstance(error, FileNotFoundError):
                raise error from None
            raise error from exc
        return data


def _client(project: str | None) -> Any:
    from google.cloud import storage  # type: ignore[attr-defined]  # (no type information)

    if os.environ.get("STORAGE_EMULATOR_HOST"):
        from google.auth.credentials import AnonymousCredentials

        return storage.Client(project=project or "ackloop-local",
                              credentials=AnonymousCredentials())  # type: ignore[no-untyped-call]
    return storage.Client(project=project)


def _translated(exc: Exception, doing: str) -> Exception:
    """The error the engine acts on for a Cloud Storage failure."""
    from google.api_core import exceptions as api

    if isinstance(exc, api.NotFound):  # an upload's: the bucket; a download's: the object
        return (FileNotFoundError(doing) if doing.startswith("reading") else PermanentError(
            f"{doing}: the bucket does not exist ({exc})", reason="files_bucket_missing"))
    if isinstance(exc, api.TooManyRequests | api.ServerError | api.RetryError
                  | ConnectionError | TimeoutError):
        return RetryableError(f"{doing}: {exc}")
    if isinstance(exc, api.GoogleAPICallError):
        return PermanentError(f"{doing}: {exc}", reason="files_store_refused")
    try:
        import requests

        if isinstance(exc, requests.RequestException):
            return RetryableError(f"{doing}: {exc}")
    except ImportError:  # pragma: no cover - google-cloud-storage depends on requests
        pass
    return exc
