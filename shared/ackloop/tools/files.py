"""Files a tool returns: an image, a document, any bytes with a MIME type.

A tool returns a :class:`File` alone, or anywhere in its result (a dict's value, a list's
item, a Pydantic model's field). The toolset takes the files out of the result and puts a
reference in each one's place (:func:`take_files`); the tool step stores their bytes in the
deployment's file store, never in Firestore, and records in the call's response only what
names them (``files``: URI, MIME type, size, SHA-256, name). The model reads each file as a
part of the function response, which the result references by ``{"$ref": name}``.
"""

from __future__ import annotations

import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ackloop.domain.jsondict import JsonDict

MODEL_READABLE = frozenset({"image/png", "image/jpeg", "image/webp", "application/pdf",
                            "text/plain"})
"""What Gemini reads in a function response's parts: images (PNG, JPEG, WebP), PDF and plain
text. Any other file is stored and referenced all the same, and the model reads that it was
returned but not shown."""

MAX_NAME_CHARS = 128
_TOKEN = r"[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
_MIME = re.compile(rf"^{_TOKEN}/{_TOKEN}$")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class File:
    """Bytes a tool returns, with their MIME type and, optionally, a name (the model and the
    run inspector see it; default: ``file-<digest>.<extension>``).

    ``File(png_bytes, "image/png", "chart.png")``, or ``File.from_path("report.pdf")``.
    """

    data: bytes
    mime_type: str
    name: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.data, bytearray | memoryview):
            object.__setattr__(self, "data", bytes(self.data))
        if not isinstance(self.data, bytes):
            raise TypeError(f"File data must be bytes, not {type(self.data).__name__}")
        if not isinstance(self.mime_type, str) or not _MIME.match(self.mime_type):
            raise ValueError(f"File mime_type {self.mime_type!r} is not a MIME type "
                             "(type/subtype, e.g. image/png)")
        object.__setattr__(self, "mime_type", self.mime_type.lower())
        if self.name is not None and (not isinstance(self.name, str) or not self.name.strip()
                                      or len(self.name) > MAX_NAME_CHARS):
            raise ValueError(f"File name must be 1 to {MAX_NAME_CHARS} characters")

    @classmethod
    def from_path(cls, path: str | Path, mime_type: str | None = None,
                  name: str | None = None) -> File:
        """The file at ``path``; its MIME type guessed from its extension unless given."""
        path = Path(path)
        guessed = mime_type or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        return cls(path.read_bytes(), guessed, name or path.name)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    def default_name(self) -> str:
        extension = mimetypes.guess_extension(self.mime_type, strict=False) or ".bin"
        return f"file-{self.sha256[:12]}{extension}"


@dataclass(frozen=True)
class NamedFile:
    """A file taken out of a result, under the name its reference in the result uses (unique
    within the call's response)."""

    file: File
    name: str


def model_readable(mime_type: str) -> bool:
    """Whether Gemini reads a file of this type in a function response."""
    return mime_type.lower() in MODEL_READABLE


def contains_file(value: Any) -> bool:
    """Whether ``value`` is a :class:`File` or holds one (in a dict, list, tuple or a Pydantic
    model's fields)."""
    if isinstance(value, File):
        return True
    if isinstance(value, dict):
        return any(contains_file(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(contains_file(v) for v in value)
    if isinstance(value, BaseModel):
        return any(contains_file(getattr(value, name)) for name in type(value).model_fields)
    return False


def take_files(value: Any) -> tuple[Any, list[NamedFile]]:
    """``value`` with each :class:`File` replaced by its reference (:func:`reference`), and the
    files in the order they were found, each under a name unique within ``value``. A Pydantic
    model that holds a file becomes the dict of its fields; the rest is left as it is."""
    found: list[NamedFile] = []
    taken: set[str] = set()

    def walk(item: Any) -> Any:
        if isinstance(item, File):
            named = NamedFile(item, _unique(_safe_name(item.name) or item.default_name(), taken))
            found.append(named)
            return reference(named)
        if not contains_file(item):
            return item
        if isinstance(item, dict):
            return {key: walk(v) for key, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        if isinstance(item, BaseModel):
            return {name: walk(getattr(item, name)) for name in type(item).model_fields}
        return item

    return walk(value), found


def reference(named: NamedFile) -> JsonDict:
    """What stands in a result for a file: ``{"$ref": name}`` for a file the model reads (its
    part in the function response carries that name), else a note that it was returned but is
    not shown to the model."""
    if model_readable(named.file.mime_type):
        return {"$ref": named.name}
    return {"file": named.name, "mime_type": named.file.mime_type, "size": len(named.file.data),
            "note": "returned and stored, but not shown to the model: it reads images (PNG, "
                    "JPEG, WebP), PDF and plain text"}


def _safe_name(name: str | None) -> str | None:
    """A name without path separators or odd characters (it is a label, and a download's
    file name in the inspector)."""
    if name is None:
        return None
    cleaned = _UNSAFE_NAME.sub("_", name.strip().replace("\\", "/").rsplit("/", 1)[-1])
    return cleaned.strip("._")[:MAX_NAME_CHARS] or None


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    stem, dot, extension = name.rpartition(".")
    while candidate in taken:
        n += 1
        candidate = f"{stem}-{n}.{extension}" if dot and stem else f"{name}-{n}"
    taken.add(candidate)
    return candidate
