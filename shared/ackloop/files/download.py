"""How a stored file is handed to a browser: its type checked against its bytes, its name made
safe for a header.

A file's declared type is what its sender said; the bytes decide whether the browser may show
it. Only the types :data:`INLINE_TYPES` names are shown inline, and only when the bytes start
as that type's do (:func:`bytes_match`): HTML declared ``image/png`` is a download of
``application/octet-stream``. A file's name goes into ``Content-Disposition`` as RFC 6266 and
RFC 5987 say (:func:`content_disposition`): an ASCII ``filename`` any client reads, and
``filename*=UTF-8''…`` with the name itself when it is not plain ASCII; control characters
(a CR/LF would end the header) are dropped.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import quote

INLINE_TYPES = frozenset({"image/png", "image/jpeg", "image/webp", "image/gif",
                          "application/pdf"})
"""What is shown in the browser (when the bytes are of that type); anything else is a download."""

DOWNLOAD_TYPE = "application/octet-stream"

_MAGIC: dict[str, tuple[bytes, ...]] = {
    "image/png": (b"\x89PNG\r\n\x1a\n",),
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "application/pdf": (b"%PDF-",),
}
_RFC5987_SAFE = "!#$&+^`|~"
"""RFC 5987 ``attr-char`` beyond letters, digits and ``-._`` (which :func:`quote` keeps)."""


def bytes_match(data: bytes, mime_type: str) -> bool:
    """Whether ``data`` starts as a file of ``mime_type`` does (its magic number); False for a
    type with no magic number known here."""
    if mime_type == "image/webp":
        return data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    magic = _MAGIC.get(mime_type)
    return magic is not None and data.startswith(magic)


def served_type(data: bytes, declared: str) -> tuple[str, str]:
    """The ``Content-Type`` and disposition (``inline`` or ``attachment``) of a file declared
    ``declared``: inline as itself only when the type is shown inline and the bytes agree."""
    if declared in INLINE_TYPES and bytes_match(data, declared):
        return declared, "inline"
    return DOWNLOAD_TYPE, "attachment"


def content_disposition(disposition: str, name: str, fallback: str) -> str:
    """The ``Content-Disposition`` header naming the file ``name`` (``fallback`` when nothing of
    it is left once its control characters are dropped)."""
    clean = "".join(c for c in name if not unicodedata.category(c).startswith("C")).strip()
    clean = clean or fallback
    ascii_name = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in clean)
    header = f'{disposition}; filename="{ascii_name}"'
    if ascii_name != clean:
        header += f"; filename*=UTF-8''{quote(clean, safe=_RFC5987_SAFE)}"
    return header
