"""The fake Gemini server's handling of file parts: the checks Gemini makes, and answers read
from the bytes.

**Checks** (:func:`invalid_part`): every ``inlineData`` part needs a ``mimeType`` and ``data``
in base64; every ``fileData`` part a ``fileUri`` and a ``mimeType``. A request that breaks one
is answered 400 ``INVALID_ARGUMENT`` naming the field, as Gemini answers it.

**Answers** (:func:`file_answer`): a request whose last content is the user's question with
file parts (and no structured output) is answered with what the files are, read from their
bytes, whatever the agent's script: for a PDF its page count (``/Type /Page`` objects) and the
text its content streams show (``(...) Tj`` and ``[...] TJ``, Flate-compressed or not); for a
PNG, JPEG, GIF or WebP image its format and size in pixels; for WAV audio its duration; for
other bytes their size and SHA-256 prefix; a ``fileData`` URI is named, not fetched. So a test
can tell that the answer came from the bytes the model was sent.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import re
import struct
import zlib

from ackloop.domain.jsondict import JsonDict


def _get(body: JsonDict, camel: str, snake: str) -> object:
    return body.get(camel, body.get(snake))


def _decoded(data: object) -> bytes | None:
    """Base64 as Gemini reads it (standard or URL-safe alphabet), None when it is not."""
    if not isinstance(data, str):
        return None
    text = data.replace("-", "+").replace("_", "/")
    text += "=" * (-len(text) % 4)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def invalid_part(body: JsonDict) -> str | None:
    """Gemini's 400 message for the first file part that lacks what it needs, else None."""
    for i, content in enumerate(body.get("contents") or []):
        if not isinstance(content, dict):
            continue
        for j, part in enumerate(content.get("parts") or []):
            if not isinstance(part, dict):
                continue
            where = f"contents[{i}].parts[{j}]"
            inline = _get(part, "inlineData", "inline_data")
            if isinstance(inline, dict):
                if not _get(inline, "mimeType", "mime_type"):
                    return (f"* GenerateContentRequest.{where}.inline_data.mime_type: "
                            "mime_type is not specified")
                data = inline.get("data")
                if not data or _decoded(data) is None:
                    shown = str(data)[:32]
                    return (f"Invalid value at '{where}.inline_data.data' (TYPE_BYTES), "
                            f'Base64 decoding failed for "{shown}"')
            file_data = _get(part, "fileData", "file_data")
            if isinstance(file_data, dict):
                if not _get(file_data, "fileUri", "file_uri"):
                    return (f"* GenerateContentRequest.{where}.file_data.file_uri: "
                            "file_uri is not specified")
                if not _get(file_data, "mimeType", "mime_type"):
                    return (f"* GenerateContentRequest.{where}.file_data.mime_type: "
                            "mime_type is not specified")
    return None


def file_answer(body: JsonDict) -> str | None:
    """What the files of the user's question are, when the request ends with that question
    and asks for no structured output; else None (the script answers)."""
    contents = [c for c in body.get("contents") or [] if isinstance(c, dict)]
    generation = body.get("generationConfig") or {}
    if not contents or generation.get("responseJsonSchema") or generation.get("responseSchema"):
        return None
    last = contents[-1]
    if last.get("role", "user") != "user":
        return None
    files = [p for p in last.get("parts") or [] if isinstance(p, dict) and (
        _get(p, "inlineData", "inline_data") or _get(p, "fileData", "file_data"))]
    if not files:
        return None
    lines = [f"I was sent {len(files)} file{'s' if len(files) != 1 else ''}."]
    for n, part in enumerate(files, 1):
        inline = _get(part, "inlineData", "inline_data")
        if isinstance(inline, dict):
            mime = str(_get(inline, "mimeType", "mime_type"))
            data = _decoded(inline.get("data")) or b""
            lines.append(f"File {n} ({mime}, {len(data)} bytes inline): {describe(data)}.")
        else:
            file_data = _get(part, "fileData", "file_data")
            assert isinstance(file_data, dict)
            lines.append(f"File {n} ({_get(file_data, 'mimeType', 'mime_type')}) at "
                         f"{_get(file_data, 'fileUri', 'file_uri')}: not read (this fake "
                         "server fetches no URI).")
    return " ".join(lines)


def describe(data: bytes) -> str:
    """What ``data`` is, from its bytes alone."""
    if data.startswith(b"%PDF-"):
        return describe_pdf(data)
    if (size := image_size(data)) is not None:
        kind, width, height = size
        return f"a {kind} image of {width}x{height} pixels"
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE" and (seconds := wav_seconds(data)):
        return f"WAV audio of {seconds:.2f} seconds"
    return f"{len(data)} bytes, SHA-256 {hashlib.sha256(data).hexdigest()[:16]}"


_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_STREAM = re.compile(rb"stream\r?\n(.*?)\r?\n?endstream", re.S)
_TJ = re.compile(rb"\(((?:\\.|[^\\)])*)\)\s*Tj")
_TJ_ARRAY = re.compile(rb"\[((?:\\.|[^\]\\])*)\]\s*TJ")
_STRING = re.compile(rb"\(((?:\\.|[^\\)])*)\)")


def describe_pdf(data: bytes) -> str:
    pages = len(_PAGE.findall(data))
    texts = pdf_texts(data)
    shown = " | ".join(texts) if texts else "(none found)"
    return f"a PDF of {pages} page{'s' if pages != 1 else ''}; its text: {shown}"


def pdf_texts(data: bytes) -> list[str]:
    """The strings the PDF's content streams show, in order."""
    texts: list[str] = []
    for match in _STREAM.finditer(data):
        stream = match.group(1)
        with contextlib.suppress(zlib.error):
            stream = zlib.decompress(stream)
        for found in re.finditer(_TJ.pattern + rb"|" + _TJ_ARRAY.pattern, stream):
            if found.group(1) is not None:
                texts.append(_unescape(found.group(1)))
            else:
                texts.append("".join(_unescape(s) for s in _STRING.findall(found.group(2))))
    return [t for t in texts if t.strip()]


def _unescape(raw: bytes) -> str:
    out = re.sub(rb"\\([nrtbf()\\])", lambda m: {
        b"n": b"\n", b"r": b"\r", b"t": b"\t", b"b": b"\b", b"f": b"\f"}.get(
            m.group(1), m.group(1)), raw)
    return out.decode("latin-1")


def image_size(data: bytes) -> tuple[str, int, int] | None:
    """(format, width, height) of a PNG, GIF, JPEG or WebP image, from its header."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and data[12:16] == b"IHDR":
        width, height = struct.unpack(">II", data[16:24])
        return "PNG", width, height
    if data[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", data[6:10])
        return "GIF", width, height
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        chunk = data[12:16]
        if chunk == b"VP8 " and len(data) >= 30:
            width, height = struct.unpack("<HH", data[26:30])
            return "WebP", width & 0x3FFF, height & 0x3FFF
        if chunk == b"VP8L" and len(data) >= 25:
            bits = int.from_bytes(data[21:25], "little")
            return "WebP", (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if chunk == b"VP8X" and len(data) >= 30:
            return ("WebP", int.from_bytes(data[24:27], "little") + 1,
                    int.from_bytes(data[27:30], "little") + 1)
    return None


def _jpeg_size(data: bytes) -> tuple[str, int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return "JPEG", width, height
        i += 2 + length
    return None


def wav_seconds(data: bytes) -> float | None:
    """A WAV file's duration: its data chunk's size over its byte rate."""
    i, rate, size = 12, 0, None
    while i + 8 <= len(data):
        chunk, length = data[i:i + 4], int.from_bytes(data[i + 4:i + 8], "little")
        if chunk == b"fmt " and length >= 12:
            rate = int.from_bytes(data[i + 16:i + 20], "little")
        elif chunk == b"data":
            size = length
            break
        i += 8 + length + (length & 1)
    return size / rate if rate and size is not None else None
