"""A query's file from a local path or a URI, as ``ackloop ask --file``, an eval's case and
:meth:`ackloop.AgentTester.ask` take them: a ``gs://`` or ``https://`` URI as given, a local
file's bytes inline, its type from its extension."""

from __future__ import annotations

import base64
from pathlib import Path

from ackloop.domain.wire import FileData, FilePart, InlineData

TYPES = {".pdf": "application/pdf", ".png": "image/png", ".jpg": "image/jpeg",
         ".jpeg": "image/jpeg", ".webp": "image/webp", ".gif": "image/gif",
         ".wav": "audio/wav", ".mp3": "audio/mp3", ".aac": "audio/aac", ".ogg": "audio/ogg",
         ".flac": "audio/flac", ".aiff": "audio/aiff", ".aif": "audio/aiff"}
"""A file's type from its extension (the types a query's file may have)."""


def mime_type_of(name: str) -> str:
    """The MIME type of a file named ``name``, from its extension (ValueError: unknown)."""
    suffix = Path(name.split("?", 1)[0]).suffix.lower()
    if suffix not in TYPES:
        raise ValueError(f"{name}: cannot tell its type from the extension "
                         f"{suffix or '(none)'!r}; known: {', '.join(sorted(TYPES))}")
    return TYPES[suffix]


def file_part(spec: str | Path) -> FilePart:
    """A gs:// or https:// URI as given, else a local file's bytes inline (OSError: it cannot
    be read; ValueError: its type is not one a query's file may have)."""
    text = str(spec)
    if text.startswith(("gs://", "https://", "http://")):
        return FilePart(file_data=FileData(file_uri=text, mime_type=mime_type_of(text)))
    path, mime_type = Path(spec), mime_type_of(text)
    data = path.read_bytes()
    return FilePart(inline_data=InlineData(mime_type=mime_type, display_name=path.name,
                                           data=base64.b64encode(data).decode("ascii")))
