"""``File``: what a tool returns for an image or a document, taken out of its result."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from ackloop import File
from ackloop.domain.wire import FunctionCall
from ackloop.tools.files import take_files
from ackloop.tools.outcome import success_outcome
from ackloop.transcript import conversation

PNG = b"\x89PNG\r\n\x1a\n" + bytes(40)


class Report(BaseModel):
    title: str
    pages: list[File]


def test_a_file_checks_its_type_and_name_and_has_a_default_name() -> None:
    assert File(bytearray(b"x"), "Image/PNG").mime_type == "image/png"
    with pytest.raises(ValueError, match="not a MIME type"):
        File(b"x", "png")
    with pytest.raises(TypeError, match="must be bytes"):
        File("text", "text/plain")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        File(b"x", "text/plain", "")
    assert File(PNG, "image/png").default_name().startswith("file-")
    assert File(PNG, "image/png").default_name().endswith(".png")


def test_files_are_taken_out_of_dicts_lists_and_models_under_unique_names() -> None:
    a, b = File(PNG, "image/png", "chart.png"), File(b"%PDF", "application/pdf", "../x/chart.png")
    value, found = take_files({"charts": [a, b], "report": Report(title="t", pages=[a])})
    assert [f.name for f in found] == ["chart.png", "chart-2.png", "chart-3.png"]
    assert value == {"charts": [{"$ref": "chart.png"}, {"$ref": "chart-2.png"}],
                     "report": {"title": "t", "pages": [{"$ref": "chart-3.png"}]}}
    assert found[1].file is b
    untouched = {"a": [1, 2], "m": Report(title="t", pages=[])}
    assert take_files(untouched) == (untouched, [])


def test_a_file_the_model_cannot_read_is_noted_in_its_place() -> None:
    outcome = success_outcome(File(b"RIFF", "audio/wav", "hello.wav"), 16 * 1024)
    assert outcome.response["result"]["file"] == "hello.wav"
    assert "not shown to the model" in outcome.response["result"]["note"]
    (named,) = outcome.files
    assert named.file.data == b"RIFF"
    assert "files" not in outcome.model_dump(mode="json")  # bytes are never dumped


def test_the_function_response_carries_a_part_per_file_the_model_reads() -> None:
    stored = [{"uri": "gs://b/files/aa-4", "mime_type": "image/png", "size": 4, "sha256": "aa",
               "name": "chart.png"},
              {"uri": "gs://b/files/bb-4", "mime_type": "audio/wav", "size": 4, "sha256": "bb",
               "name": "hello.wav"}]
    response = {"result": [{"$ref": "chart.png"}, {"file": "hello.wav"}], "files": stored}
    part = conversation.function_response_part(FunctionCall(name="f", args={}, id="c1"),
                                               response)
    assert part == {"function_response": {
        "name": "f", "id": "c1",
        "response": {"result": [{"$ref": "chart.png"}, {"file": "hello.wav"}]},
        "parts": [{"file_data": {"file_uri": "gs://b/files/aa-4", "mime_type": "image/png",
                                 "display_name": "chart.png"}}]}}
    # A response whose "files" is not a list of stored files is left as it is.
    own = {"result": "x", "files": ["a.txt"]}
    assert conversation.function_response_part(FunctionCall(name="f", args={}), own) == {
        "function_response": {"name": "f", "response": own}}


def test_a_cut_result_keeps_its_files() -> None:
    stored = {"uri": "gs://b/files/aa-4", "mime_type": "image/png", "size": 4, "sha256": "aa",
              "name": "chart.png"}
    pairs = [(FunctionCall(name="f", args={}), {"result": "x" * 600_000, "files": [stored]})]
    (part,) = conversation.function_responses(pairs)["parts"]
    body = part["function_response"]
    assert "truncated" in body["response"] and "files" not in body["response"]
    assert body["parts"][0]["file_data"]["display_name"] == "chart.png"
