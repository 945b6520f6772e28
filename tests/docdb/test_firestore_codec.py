"""The raw-protobuf codec of the Firestore adapter builds exactly the writes the client library
builds, and decodes documents to exactly what the library's snapshots give."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from google.api_core.datetime_helpers import DatetimeWithNanoseconds
from google.auth.credentials import AnonymousCredentials
from google.cloud import firestore
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.base_client import _parse_batch_get
from google.cloud.firestore_v1.field_path import FieldPath
from google.cloud.firestore_v1.types import document
from google.cloud.firestore_v1.types import firestore as firestore_types
from google.protobuf import timestamp_pb2

from ackloop.docdb import firestore_codec as codec
from ackloop.docdb.base import Write
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.domain.frozen import freeze

PATH = "projects/p/databases/(default)/documents/runs/r1/steps/0001-tool-000"
UTC = datetime.UTC

DATA: list[dict[str, Any]] = [
    {},
    {"status": "running", "fence": 1, "attempts": 2, "cost": 0.25, "unclaimed": True,
     "owner": None, "blob": b"\x00\x01", "empty_map": {}, "empty_list": [],
     "at": datetime.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
     "naive": datetime.datetime(2026, 1, 2, 3, 4, 5),
     "nanos": DatetimeWithNanoseconds(2026, 1, 2, 3, 4, 5, nanosecond=123456789, tzinfo=UTC),
     "outbox": [{"topic": "tool-steps", "data": "eyJ9", "attributes": {"run_id": "r1"}},
                {"nested": [[1, 2.5, "x"], {"a.b": {"c": None}}]}],
     "tuple": (1, "two"), "big": 2**62, "neg": -7, "unicode": "héllo \u2603",
     "dotted.key": "v", "`tick`": {"k-1": 1}},
    # The history a process shares, frozen (a transcript's kept turns written again).
    {"kept": freeze([{"role": "model", "parts": [{"text": "x", "n": (1, 2.5)}]}]),
     "turns": {"t000000": freeze([{"role": "user", "parts": []}])}},
    # Values the codec leaves to the library:
    {"geo": firestore.GeoPoint(1.5, 2.5), "set": {1}},
    {"sentinel": firestore.SERVER_TIMESTAMP, "x": 1},
    {"sub": type("Text", (str,), {})("subclass"), "flag": 1},
]


def _client() -> firestore.AsyncClient:
    return firestore.AsyncClient(project="p", credentials=AnonymousCredentials())


def _library_write(op: str, data: dict[str, Any], option: Any = None) -> Any:
    if op == "create":
        return _helpers.pbs_for_create(PATH, data)[0]._pb
    if op == "set":
        return _helpers.pbs_for_set_no_merge(PATH, data)[0]._pb
    return _helpers.pbs_for_update(PATH, data, option)[0]._pb


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("op", ["create", "set"])
def test_create_and_set_are_the_librarys(op: str, data: dict[str, Any]) -> None:
    ours = codec.create_pb(PATH, data) if op == "create" else codec.set_pb(PATH, data)
    assert ours == _library_write(op, data)


UPDATES: list[dict[str, Any]] = [
    {"status": "completed", "result": {"answer": "42", "empty": {}}, "n": 3},
    {FieldPath("turns", "t000001").to_api_repr(): {"contents": [{"role": "model"}]},
     FieldPath("turns", "t000002").to_api_repr(): [],
     "`a.b`": 1, "size": 10},
    {FieldPath("received", "name-with-dash").to_api_repr(): {"payload": None}},
    {"geo": firestore.GeoPoint(1.0, 2.0)},
    # Simple and quoted paths mixed, sorted as the library sorts them (by their segments).
    {"z": 1, "a.b": 2, "`a.c`": 3, "a.a": {"k": [1]}, "_m": None},
]


@pytest.mark.parametrize("key", [
    "status", "_a1", "turns.t000001", "a.b.c", "`a.b`", "received.`name-with-dash`",
    "`1st`", "a.`b c`.d", "x.`y`",
])
def test_a_field_paths_parts_are_the_librarys(key: str) -> None:
    assert codec.field_path_parts(key) == tuple(FieldPath.from_string(key).parts)


@pytest.mark.parametrize("updates", UPDATES)
@pytest.mark.parametrize("versioned", [False, True])
def test_updates_are_the_librarys(updates: dict[str, Any], versioned: bool) -> None:
    client = _client()
    version = codec.version_of(timestamp_pb2.Timestamp(seconds=1_700_000_000, nanos=123456789))
    option = client.write_option(last_update_time=version) if versioned else None
    assert codec.update_pb(PATH, updates, option) == _library_write("update", updates, option)


@pytest.mark.parametrize("updates", [{}, {"a": 1, "a.b": 2}])
def test_updates_the_library_refuses_are_refused_as_it_refuses_them(
        updates: dict[str, Any]) -> None:
    with pytest.raises(Exception) as ours:
        codec.update_pb(PATH, updates, None)
    with pytest.raises(Exception) as theirs:
        _library_write("update", updates)
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


def test_an_unencodable_value_fails_as_in_the_library() -> None:
    with pytest.raises(TypeError):
        codec.set_pb(PATH, {"x": object()})


def test_the_adapter_builds_each_write_as_the_library() -> None:
    db = FirestoreDocumentDB(_client())
    version = codec.version_of(timestamp_pb2.Timestamp(seconds=5, nanos=7))
    write = Write("update", "runs/r1", {"status": "done", "a.b": 1}, if_version=version,
                  into={"turns": {"t000003": {"x": 1}}})
    full = "projects/p/databases/(default)/documents/runs/r1"
    batch = db.client.batch()
    batch.update(db.client.document("runs/r1"),
                 {"status": "done", "`a.b`": 1, "turns.t000003": {"x": 1}},
                 option=db.client.write_option(last_update_time=version))
    assert db._write_pb(full, write) == batch._write_pbs[0]._pb


@pytest.mark.parametrize("data", DATA[:3])
def test_decoding_is_the_librarys(data: dict[str, Any]) -> None:
    client = _client()
    fields = codec.set_pb(PATH, data).update.fields
    response = firestore_types.BatchGetDocumentsResponse(
        found=document.Document(name=PATH, fields=dict(fields.items()),
                                update_time=timestamp_pb2.Timestamp(seconds=9, nanos=1)))
    snapshot = _parse_batch_get(response, {PATH: client.document("runs/r1/steps/0001-tool-000")},
                                client)
    ours = codec.decode_fields(type(response).pb(response).found.fields, client)
    assert ours == snapshot.to_dict()
    assert [type(v) for v in ours.values()] == [type(v) for v in snapshot.to_dict().values()]
    version = codec.version_of(type(response).pb(response).found.update_time)
    assert version == snapshot.update_time and type(version) is type(snapshot.update_time)
