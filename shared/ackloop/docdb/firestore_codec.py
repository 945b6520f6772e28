"""Firestore documents to and from the raw protobuf messages, without the client library's
per-value wrapping.

google-cloud-firestore builds each write through proto-plus (a wrapper object and a marshal per
value, the data walked twice to find sentinels) and copies every read document twice
(``DocumentSnapshot`` deep-copies its data, ``to_dict`` again): most of a step's CPU went there.
This module builds the same ``Write`` messages directly on the raw (upb) messages and decodes a
found document straight into Python values.

It produces exactly what the library produces: the plain types ackloop stores (``None``,
``bool``, ``int``, ``float``, ``str``, ``bytes``, ``datetime``, ``list``, ``tuple``, ``dict``, and
the frozen ``list`` and ``dict`` of :mod:`ackloop.domain.frozen`)
are encoded here as the library encodes them, and a write holding anything else (a sentinel,
a GeoPoint, a document reference, a subclass...) is built by the library itself, so its
semantics and its errors stay the library's. Reads decode the plain value kinds here and leave
the rest (references, geo points, vector and BSON maps) to the library's decoder.
``tests/docdb/test_firestore_codec.py`` compares both on every shape the store writes.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from typing import Any

from google.api_core.datetime_helpers import DatetimeWithNanoseconds as ValueTime
from google.cloud._helpers import _datetime_to_pb_timestamp
from google.cloud.firestore_v1 import _helpers
from google.cloud.firestore_v1.field_path import FieldPath
from google.cloud.firestore_v1.types import document, write
from proto.datetime_helpers import DatetimeWithNanoseconds as VersionTime

from ackloop.docdb.decode_cache import DecodeCache, version_key
from ackloop.domain.frozen import FrozenDict, FrozenList
from ackloop.domain.jsondict import JsonDict

WritePb = write.Write.pb()
ValuePb = document.Value.pb()


class _Unsupported(Exception):
    """A value this codec leaves to the library."""


def _put(target: Any, value: Any) -> None:
    """Set the raw ``Value`` ``target`` to ``value`` (exact plain types only)."""
    kind = type(value)
    if kind is str:
        target.string_value = value
    elif value is None:
        target.null_value = 0
    elif kind is bool:
        target.boolean_value = value
    elif kind is int:
        target.integer_value = value
    elif kind is float:
        target.double_value = value
    elif kind is dict or kind is FrozenDict:
        _put_map(target.map_value, value)
    elif kind is list or kind is tuple or kind is FrozenList:
        array = target.array_value
        array.SetInParent()
        values = array.values
        for item in value:
            _put(values.add(), item)
    elif kind is ValueTime:
        target.timestamp_value.CopyFrom(value.timestamp_pb())
    elif kind is datetime.datetime:
        target.timestamp_value.CopyFrom(_datetime_to_pb_timestamp(value))  # type: ignore[no-untyped-call]
    elif kind is bytes:
        target.bytes_value = value
    else:
        raise _Unsupported(kind)


def _put_map(target: Any, data: Mapping[str, Any]) -> None:
    target.SetInParent()
    fields = target.fields
    for key, value in data.items():
        if type(key) is not str:
            raise _Unsupported(type(key))
        _put(fields[key], value)


def _document(path: str, fields: Mapping[str, Any]) -> Any:
    pb = WritePb()
    update = pb.update
    update.name = path
    out = update.fields
    for key, value in fields.items():
        if type(key) is not str:
            raise _Unsupported(type(key))
        _put(out[key], value)
    return pb


def create_pb(path: str, data: JsonDict) -> Any:
    """The raw ``Write`` of ``create(data)`` at ``path`` (a full document path)."""
    try:
        pb = _document(path, data)
    except _Unsupported:
        return _helpers.pbs_for_create(path, data)[0]._pb
    pb.current_document.exists = False
    return pb


def set_pb(path: str, data: JsonDict) -> Any:
    """The raw ``Write`` of ``set(data)`` (no merge) at ``path``."""
    try:
        return _document(path, data)
    except _Unsupported:
        return _helpers.pbs_for_set_no_merge(path, data)[0]._pb


def update_pb(path: str, field_updates: JsonDict, option: Any) -> Any:
    """The raw ``Write`` of ``update(field_updates, option=option)`` at ``path``: the keys are
    field paths (dotted, backquoted), as the library's ``update`` takes them."""
    try:
        pb = _update(path, field_updates)
    except (_Unsupported, ValueError):
        return _helpers.pbs_for_update(path, field_updates, option)[0]._pb
    if option is None:
        pb.current_document.exists = True
    else:
        option.modify_write(write.Write.wrap(pb))
    return pb


_SIMPLE_PATH = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*(?:\.[_a-zA-Z][_a-zA-Z0-9]*)*\Z")
"""A field path whose every segment is a simple field name (the library's own pattern for one
that needs no backquotes): its segments are its dots' pieces, and it renders as it is."""


def field_path_parts(key: str) -> tuple[str, ...]:
    """The segments of the field path ``key`` (dotted, backquoted), as the library parses it;
    a path of simple names without its tokenizer (a few microseconds a key, on every update)."""
    if _SIMPLE_PATH.match(key):
        return tuple(key.split("."))
    return tuple(FieldPath.from_string(key).parts)


def _update(path: str, field_updates: JsonDict) -> Any:
    if not field_updates:
        raise _Unsupported("empty update")  # the library refuses it
    parsed = {key: field_path_parts(key) for key in field_updates}
    tops = set(parsed.values())
    for parts in tops:
        if any(parts[:i] in tops for i in range(1, len(parts))):
            raise _Unsupported("conflicting paths")  # the library refuses them
    nested: dict[str, Any] = {}
    for key, value in field_updates.items():
        parts = parsed[key]
        current = nested
        for part in parts[:-1]:
            current = current.setdefault(part, {})
        current[parts[-1]] = value
    pb = _document(path, nested)
    pb.update_mask.field_paths.extend(
        key if _SIMPLE_PATH.match(key) else FieldPath(*parts).to_api_repr()
        for key, parts in sorted(parsed.items(), key=lambda item: item[1]))
    return pb


def version_of(timestamp_pb: Any) -> VersionTime:
    """A document's update time as the library's snapshots and write results give it."""
    return VersionTime.from_timestamp_pb(timestamp_pb)


def decode_fields(fields: Any, client: Any, cache: DecodeCache | None = None) -> JsonDict:
    """A found document's fields (a raw ``map<string, Value>``) as Python values; with
    ``cache``, each entry of a top-level map or array through it (the same values, decoded
    once per process: :mod:`ackloop.docdb.decode_cache`)."""
    if cache is None:
        return {key: _value(value, client) for key, value in fields.items()}

    def decode(entry: Any) -> Any:
        return _canonical(entry, client)

    return {key: _cached_field(value, client, cache, decode)[0]
            for key, value in fields.items()}


def decode_admitted(path: str, doc: Any, client: Any, cache: DecodeCache) -> JsonDict:
    """The fields of ``doc`` (a found raw ``Document`` at ``path``) decoded through ``cache``:
    what this process knows the document held at its version, else entry by entry, and then
    known at that version (:mod:`ackloop.docdb.decode_cache`)."""
    def decode(entry: Any) -> Any:
        return _canonical(entry, client)

    version = version_key(doc.update_time)
    fields = doc.fields
    known = cache.known(path, version)
    if known is not None:
        kept = known.fields
        return {name: cache.thaw(known, name, decode) if name in kept
                else _cached_field(value, client, cache, decode)[0]
                for name, value in fields.items()}
    found: JsonDict = {}
    frozen: JsonDict = {}
    for name, value in fields.items():
        found[name], frozen[name] = _cached_field(value, client, cache, decode)
    cache.remember(path, version, frozen)
    return found


def _cached_field(pb: Any, client: Any, cache: DecodeCache, decode: Any) -> tuple[Any, Any]:
    """A top-level field's value and what a document keeps of it."""
    kind = pb.WhichOneof("value_type")
    if kind == "map_value":
        fields = pb.map_value.fields
        if not any(key.startswith("__") for key in fields):  # not a vector or BSON value
            values: JsonDict = {}
            frozen: JsonDict = {}
            for key in sorted(fields):
                values[key], frozen[key] = _entry(fields[key], cache, decode)
            return values, cache.entries(frozen)
    elif kind == "array_value":
        pairs = [_entry(item, cache, decode) for item in pb.array_value.values]
        return [v for v, _ in pairs], cache.entries([f for _, f in pairs])
    value = _canonical(pb, client)
    return value, cache.frozen(value)


def _canonical(pb: Any, client: Any) -> Any:
    """:func:`_value` as the decode cache shares it: each map and array frozen
    (:mod:`ackloop.domain.frozen`), each plain map's keys in order (Firestore's maps have
    none, so a value decoded here is the same whatever message carried it: the server's
    answer to a read, or the write this process sent)."""
    kind = pb.WhichOneof("value_type")
    if kind == "map_value":
        fields = pb.map_value.fields
        if not any(key.startswith("__") for key in fields):
            return FrozenDict({key: _canonical(fields[key], client) for key in sorted(fields)})
    elif kind == "array_value":
        return FrozenList(_canonical(item, client) for item in pb.array_value.values)
    return _value(pb, client)


def _entry(pb: Any, cache: DecodeCache, decode: Any) -> tuple[Any, Any]:
    if pb.WhichOneof("value_type") in ("map_value", "array_value"):
        return cache.entry(pb, decode)
    value = decode(pb)  # a scalar: nothing to save
    return value, cache.frozen(value)


def _value(pb: Any, client: Any) -> Any:
    kind = pb.WhichOneof("value_type")
    if kind == "string_value":
        return pb.string_value
    if kind == "integer_value":
        return pb.integer_value
    if kind == "map_value":
        fields = pb.map_value.fields
        if any(key.startswith("__") for key in fields):  # a vector or BSON value, maybe
            return _helpers.decode_dict(fields, client)
        return {key: _value(value, client) for key, value in fields.items()}
    if kind == "timestamp_value":
        return ValueTime.from_timestamp_pb(pb.timestamp_value)  # type: ignore[no-untyped-call]
    if kind == "boolean_value":
        return pb.boolean_value
    if kind == "null_value":
        return None
    if kind == "double_value":
        return pb.double_value
    if kind == "array_value":
        return [_value(item, client) for item in pb.array_value.values]
    if kind == "bytes_value":
        return pb.bytes_value
    return _helpers.decode_value(pb, client)


__all__ = ["create_pb", "decode_admitted", "decode_fields", "set_pb", "update_pb", "version_of"]
