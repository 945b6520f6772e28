"""The fake Gemini server's file parts: Gemini's 400 for a part without what it needs, and an
answer read from the bytes; and `ackloop ask --file`'s parts."""

from __future__ import annotations

import base64
import re
import struct
import zlib
from pathlib import Path

import httpx
import pytest

from ackloop.cli.ask import file_part, mime_type_of
from ackloop.cli.errors import CliError
from ackloop.domain.jsondict import JsonDict
from ackloop.model.base import ModelRequest, ModelTurn
from ackloop.model.turns import text_turn
from ackloop_dev.fakes.gemini_files import describe, image_size, wav_seconds
from ackloop_dev.fakes.gemini_server import FakeGeminiServer
from tests.files.samples import pdf, png

URL = "/v1beta/models/gemini-test:generateContent"


def _script(request: ModelRequest) -> ModelTurn:
    return text_turn("scripted", request=request)


@pytest.mark.parametrize("part, says", [
    ({"inlineData": {"data": base64.b64encode(b"x").decode()}},
     "contents[0].parts[0].inline_data.mime_type: mime_type is not specified"),
    ({"inlineData": {"mimeType": "image/png", "data": "%%% not base64"}},
     "Invalid value at 'contents[0].parts[0].inline_data.data' (TYPE_BYTES), Base64 decoding "
     "failed"),
    ({"fileData": {"mimeType": "application/pdf"}},
     "contents[0].parts[0].file_data.file_uri: file_uri is not specified"),
    ({"fileData": {"fileUri": "gs://b/o"}},
     "contents[0].parts[0].file_data.mime_type: mime_type is not specified"),
])
def test_a_file_part_without_what_gemini_needs_is_its_400(part: JsonDict, says: str) -> None:
    with FakeGeminiServer(_script) as server:
        answer = httpx.post(server.url + URL, json={"contents": [
            {"role": "user", "parts": [part, {"text": "what is it?"}]}]})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT" and says in error["message"], error


def test_the_answer_about_files_comes_from_their_bytes_and_only_for_the_question() -> None:
    document = pdf(["one", "two (2)", "three"])
    with FakeGeminiServer(_script) as server:
        about = httpx.post(server.url + URL, json={"contents": [{"role": "user", "parts": [
            {"inlineData": {"mimeType": "application/pdf",
                            "data": base64.b64encode(document).decode()}},
            {"text": "pages?"}]}]}).json()
        later = httpx.post(server.url + URL, json={"contents": [
            {"role": "user", "parts": [{"fileData": {"fileUri": "gs://b/o",
                                                     "mimeType": "image/png"}}]},
            {"role": "model", "parts": [{"text": "a file"}]},
            {"role": "user", "parts": [{"text": "and?"}]}]}).json()
    text = about["candidates"][0]["content"]["parts"][0]["text"]
    assert text == (f"I was sent 1 file. File 1 (application/pdf, {len(document)} bytes "
                    "inline): a PDF of 3 pages; its text: one | two (2) | three.")
    assert later["candidates"][0]["content"]["parts"][0]["text"] == "scripted"


def test_images_and_audio_are_described_from_their_headers() -> None:
    assert image_size(png(5, 9)) == ("PNG", 5, 9)
    gif = b"GIF89a" + struct.pack("<HH", 12, 34) + b"\0" * 10
    assert image_size(gif) == ("GIF", 12, 34)
    jpeg = (b"\xff\xd8" + b"\xff\xe0" + struct.pack(">H", 4) + b"JF"
            + b"\xff\xc0" + struct.pack(">HBHH", 11, 8, 48, 64) + b"\0" * 6)
    assert image_size(jpeg) == ("JPEG", 64, 48)
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 16000, 2, 16)
    wav = (b"RIFF" + struct.pack("<I", 36 + 8000) + b"WAVE" + b"fmt " + struct.pack("<I", 16)
           + fmt + b"data" + struct.pack("<I", 8000) + b"\0" * 8000)
    assert wav_seconds(wav) == 0.5 and describe(wav) == "WAV audio of 0.50 seconds"
    stream = zlib.compress(b"BT (squeezed) Tj ET")
    assert "its text: squeezed" in describe(b"%PDF-1.4\n/Type /Page\nstream\n" + stream
                                            + b"\nendstream")


def test_ask_file_reads_a_local_file_inline_and_passes_a_uri_as_given(tmp_path: Path) -> None:
    path = tmp_path / "Scan.PDF"
    path.write_bytes(b"%PDF-1.4")
    part = file_part(str(path))
    assert part.inline_data is not None and part.inline_data.mime_type == "application/pdf"
    assert part.inline_data.display_name == "Scan.PDF"
    assert base64.b64decode(part.inline_data.data) == b"%PDF-1.4"
    uri = file_part("gs://bucket/photos/cat.webp")
    assert uri.file_data is not None and uri.file_data.mime_type == "image/webp"
    assert mime_type_of("a.mp3") == "audio/mp3"
    (tmp_path / "notes.docx").write_bytes(b"PK")
    with pytest.raises(CliError, match=re.escape("from the extension '.docx'")):
        file_part(str(tmp_path / "notes.docx"))
    with pytest.raises(CliError, match="No such file"):
        file_part(str(tmp_path / "absent.png"))
