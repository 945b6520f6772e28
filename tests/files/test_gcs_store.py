"""The Cloud Storage file store against the Cloud Storage emulator (gcp-storage-emulator),
through the real google-cloud-storage client."""

from __future__ import annotations

import hashlib
import uuid

import pytest

from ackloop.domain.errors import PermanentError
from ackloop.domain.keys import run_id_for_request
from ackloop.domain.wire import QueryMessage
from ackloop.files import for_request, object_name, stored_part
from ackloop.files.gcs import GcsFileStore
from ackloop_dev.devstack.emulators import ensure_bucket
from tests.files.samples import pdf
from tests.files.test_query_files import inline, loop_of, never

PROJECT = "ackloop-test"
INVOICE = pdf(["Invoice 9", "Page two", "Page three"])


@pytest.fixture
def bucket(storage_host: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", storage_host)
    name = f"files-{uuid.uuid4().hex[:10]}"
    ensure_bucket(storage_host, name, PROJECT)
    return name


async def test_put_is_idempotent_by_digest_and_get_reads_the_bytes_back(bucket: str) -> None:
    store = GcsFileStore(bucket, project=PROJECT)
    stored = await store.put(INVOICE, "application/pdf", name="invoice.pdf")
    again = await store.put(INVOICE, "application/pdf", name="invoice.pdf")
    assert stored == again
    assert stored.uri == f"gs://{bucket}/{object_name(INVOICE)}"
    assert stored.size == len(INVOICE) and stored.sha256 == hashlib.sha256(INVOICE).hexdigest()
    assert store.owns(stored.uri) and not store.owns(f"gs://other/{object_name(INVOICE)}")
    fresh = GcsFileStore(bucket, project=PROJECT)  # another process: no cache
    assert await fresh.get(stored.uri) == INVOICE

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage  # type: ignore[attr-defined]

    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
    (blob,) = client.list_blobs(bucket)
    assert blob.name == object_name(INVOICE) and blob.content_type == "application/pdf"
    assert blob.size == len(INVOICE)


async def test_a_missing_object_is_file_not_found_and_a_missing_bucket_is_permanent(
        bucket: str) -> None:
    store = GcsFileStore(bucket, project=PROJECT)
    with pytest.raises(FileNotFoundError):
        await store.get(f"gs://{bucket}/{object_name(b'never stored')}")
    part = stored_part(await store.put(b"gone soon", "image/png"))
    missing = GcsFileStore(f"{bucket}-missing", project=PROJECT)
    with pytest.raises(PermanentError) as refused:
        await missing.put(b"bytes", "image/png")
    assert refused.value.reason == "files_bucket_missing"
    sent = await for_request(store, [{"role": "user", "parts": [part]}])
    assert sent[0]["parts"][0]["inline_data"]["mime_type"] == "image/png"


async def test_a_pdf_question_goes_through_the_bucket_to_the_model(bucket: str) -> None:
    """The query's bytes are put in the emulator's bucket at ingest, read back by the model
    step, and sent to Gemini (the fake server, through google-genai), which reads the pages."""
    from ackloop.model.gemini import GeminiModel
    from ackloop_dev.fakes.gemini_server import FakeGeminiServer

    store = GcsFileStore(bucket, project=PROJECT)
    with FakeGeminiServer(never) as server:
        loop = loop_of(GeminiModel(api_key="k", base_url=server.url, timeout_seconds=5.0),
                       files=store)
        await loop.submit(QueryMessage.model_validate({
            "request_id": "gcs-pdf", "text": "How many pages?",
            "files": [inline(INVOICE, "application/pdf", "invoice.pdf")]}))
        await loop.run_until_idle()
    run = await loop.deps.store.get_run(run_id_for_request("gcs-pdf"))
    assert run is not None and run.answer is not None, loop.deliveries("query")[-1].outcome
    assert "a PDF of 3 pages" in run.answer and "Invoice 9" in run.answer, run.answer
    assert run.files == [{"file_data": {"file_uri": f"gs://{bucket}/{object_name(INVOICE)}",
                                        "mime_type": "application/pdf",
                                        "display_name": "invoice.pdf"}}]
    assert await GcsFileStore(bucket, project=PROJECT).get(
        run.files[0]["file_data"]["file_uri"]) == INVOICE
