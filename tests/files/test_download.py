"""How a stored file is handed to a browser: its type from its bytes, its name as a header."""

from __future__ import annotations

import pytest

from ackloop.files.download import bytes_match, content_disposition, served_type

SHA = "ab" * 32


@pytest.mark.parametrize(("data", "declared", "served"), [
    (b"\x89PNG\r\n\x1a\nrest", "image/png", ("image/png", "inline")),
    (b"\xff\xd8\xff\xe0rest", "image/jpeg", ("image/jpeg", "inline")),
    (b"GIF89a rest", "image/gif", ("image/gif", "inline")),
    (b"GIF87a rest", "image/gif", ("image/gif", "inline")),
    (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "image/webp", ("image/webp", "inline")),
    (b"%PDF-1.7 rest", "application/pdf", ("application/pdf", "inline")),
    (b"<html><script>", "image/png", ("application/octet-stream", "attachment")),
    (b"\x89PNG\r\n\x1a\nrest", "image/jpeg", ("application/octet-stream", "attachment")),
    (b"RIFF\x10\x00\x00\x00WAVEfmt ", "image/webp", ("application/octet-stream", "attachment")),
    (b"", "application/pdf", ("application/octet-stream", "attachment")),
    (b"RIFF\x10\x00\x00\x00WAVEfmt ", "audio/wav", ("application/octet-stream", "attachment")),
    (b"<svg onload=alert(1)>", "image/svg+xml", ("application/octet-stream", "attachment")),
])
def test_only_bytes_of_the_declared_inline_type_are_shown(data: bytes, declared: str,
                                                          served: tuple[str, str]) -> None:
    assert served_type(data, declared) == served
    assert bytes_match(data, declared) == (served[1] == "inline")


@pytest.mark.parametrize(("name", "header"), [
    ("chart.png", 'inline; filename="chart.png"'),
    ('say "hi".png', "inline; filename=\"say _hi_.png\"; filename*=UTF-8''say%20%22hi%22.png"),
    ("a\\b.png", "inline; filename=\"a_b.png\"; filename*=UTF-8''a%5Cb.png"),
    ("evil\r\nSet-Cookie: x=y", 'inline; filename="evilSet-Cookie: x=y"'),
    ("tab\there\x00\x7f.png", 'inline; filename="tabhere.png"'),
    ("履歴書.pdf",
     "inline; filename=\"___.pdf\"; filename*=UTF-8''%E5%B1%A5%E6%AD%B4%E6%9B%B8.pdf"),
    ("café.png", "inline; filename=\"caf_.png\"; filename*=UTF-8''caf%C3%A9.png"),
    ("gnp.\u202eexe", "inline; filename=\"gnp.exe\""),  # no right-to-left override
    ("\r\n", f'inline; filename="{SHA}"'),
])
def test_a_name_becomes_an_ascii_filename_and_the_utf8_name_beside_it(name: str,
                                                                      header: str) -> None:
    got = content_disposition("inline", name, SHA)
    assert got == header
    got.encode("latin-1")  # a header Starlette can send
