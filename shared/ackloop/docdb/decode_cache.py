"""Decoding a transcript chunk's turns once per process, not once per read.

A model step reads its conversation's last transcript chunk on every turn, and every turn
before it has appended to that chunk: the chunk's version is new on each read, but all of it
but the last turn is what the previous read already decoded. Decoding a Firestore document
(its raw ``Value`` messages into Python values, :mod:`ackloop.docdb.firestore_codec`) is the
part of a read that grows with the chunk, so a warm process keeps what it decoded, at two
levels:

* **The document at its version.** For each admitted document it read or wrote, the process
  keeps what the document held at one version (its update time): each field, and each entry
  of a top-level map or array field. A read that finds the document at that version decodes
  nothing it keeps. A commit this process makes moves the document to the version the commit
  returned, with what the write set (:meth:`DecodeCache.wrote`): an update fenced on the
  version kept (the append of a turn is one) adds its entries, so the next model step of the
  conversation in this process finds the whole chunk known, however long it is, and decodes
  only the new turn. The version decides, exactly: a document another process wrote since,
  or one deleted and written again, is at another version and is decoded (through the entries
  below). What cannot be known exactly from a write (an update with no version fence, a
  server-side transform, a field path inside an entry) drops the document; a field whose
  value is not plain (a timestamp inside a map) is left out and decoded on every read.
* **Each entry by its encoded bytes.** An entry (one value of a top-level map or array field:
  a chunk's turn in ``turns``, a content of ``contents`` or ``kept``) of a document read at an
  unknown version is keyed by its ``Value`` message serialized deterministically. Equal bytes
  decode to equal values, so a hit is exact whatever the document's version, whoever wrote it
  and whatever happened to the document in between (an entry changed, or the chunk deleted
  and written again, is other bytes: a miss, decoded afresh).

What is kept is shared, and frozen (:mod:`ackloop.domain.frozen`): every map and array of an
entry is decoded as a :class:`~ackloop.domain.frozen.FrozenDict` or
:class:`~ackloop.domain.frozen.FrozenList`, so every reader gets the same values and none can
change them for the others (a copy is the reader's own). A read costs no copy of what is
known, and what the model layer works out from a content (its validation) is kept by the
content's identity. A top-level map or array field is a new ``dict`` or ``list`` on each
read (of shared entries).

Bounded: least recently used entries, then least recently used documents, go first once
what is kept passes ``max_bytes`` (``ACKLOOP_DECODE_CACHE_BYTES``; 0: no cache), each value
counted by the memory its objects take.
"""

from __future__ import annotations

import datetime
import sys
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Any

from ackloop.domain.frozen import FROZEN

ENTRY_OVERHEAD = 200
"""Bytes counted per kept entry besides its key and value (the objects that hold them)."""

Version = tuple[int, int]
"""A document's update time as ``(seconds, nanos)``."""

Decode = Callable[[Any], Any]
"""Decodes one raw ``Value`` message."""

_SHAREABLE = (str, int, float, bool, type(None), bytes, datetime.datetime, *FROZEN)
"""What a value that may be handed to every reader is: immutable."""


class _Shared:
    """A frozen value, decoded once, and the memory it takes."""

    __slots__ = ("cost", "value")

    def __init__(self, value: Any, cost: int) -> None:
        self.value = value
        self.cost = cost


class _Pending:
    """A value this process wrote, as its ``Value`` message: decoded on the first read."""

    __slots__ = ("pb",)

    def __init__(self, pb: Any) -> None:
        self.pb = pb


class _Entries(dict[str, Any]):
    """A top-level map field, entry by entry (each shareable or pending)."""


class _Items(list[Any]):
    """A top-level array field, item by item (each shareable or pending)."""


_UNKNOWN = object()
"""What a value that cannot be kept is kept as (a field left out: decoded on every read)."""


class Known:
    """What a document held at ``version``: its fields, each shareable, pending or entry by
    entry; a field it held that is not in :attr:`fields` is decoded from the read."""

    __slots__ = ("cost", "fields", "version")

    def __init__(self, version: Version, fields: dict[str, Any]) -> None:
        self.version = version
        self.fields = fields
        self.cost = 0


def version_key(timestamp_pb: Any) -> Version:
    """A raw ``Timestamp`` (a document's update time) as a :data:`Version`."""
    return timestamp_pb.seconds, timestamp_pb.nanos


class DecodeCache:
    """Decoded documents and entries of the documents of some collections."""

    def __init__(self, max_bytes: int, collections: Collection[str]) -> None:
        self.max_bytes = max_bytes
        self.collections = frozenset(collections)
        self._kept: OrderedDict[bytes, _Shared] = OrderedDict()
        self._known: OrderedDict[str, Known] = OrderedDict()
        self._entries_size = 0
        self._known_size = 0
        self.hits = 0
        self.misses = 0
        self.known_hits = 0
        """Reads that found their document at the version kept."""

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def size(self) -> int:
        """Bytes counted now: each entry's key, its value's objects and
        :data:`ENTRY_OVERHEAD`, and what each document keeps besides."""
        return self._entries_size + self._known_size

    def admits(self, path: str) -> bool:
        """Whether the document at ``path`` is decoded through the cache: it is in one of
        :attr:`collections` (the id of its parent collection)."""
        parts = path.rsplit("/", 2)
        return len(parts) == 3 and parts[1] in self.collections

    # -- entries, by their encoded bytes --------------------------------------------------

    def entry(self, pb: Any, decode: Decode) -> tuple[Any, Any]:
        """The value of the raw ``Value`` ``pb`` (decoded by ``decode`` into frozen values, or,
        when the same bytes were decoded before, what that gave), and the value as a document
        keeps it (:data:`_UNKNOWN` if it cannot)."""
        raw: bytes = pb.SerializeToString(deterministic=True)
        kept = self._kept.get(raw)
        if kept is not None:
            self._kept.move_to_end(raw)
            self.hits += 1
            return kept.value, kept
        self.misses += 1
        value = decode(pb)
        if not isinstance(value, _SHAREABLE):
            return value, _UNKNOWN  # a reference, a geo point...: decoded every time
        kept = _Shared(value, len(raw) + footprint(value) + ENTRY_OVERHEAD)
        if kept.cost <= self.max_bytes:
            self._kept[raw] = kept
            self._entries_size += kept.cost
            self._trim()
        return value, kept

    # -- documents, at a version ----------------------------------------------------------

    def known(self, path: str, version: Version) -> Known | None:
        """What the document at ``path`` held at ``version``, if this process knows it."""
        known = self._known.get(path)
        if known is None or known.version != version:
            return None
        self._known.move_to_end(path)
        self.known_hits += 1
        return known

    def remember(self, path: str, version: Version, fields: dict[str, Any]) -> None:
        """Keep what a read decoded of the document at ``path`` at ``version``: ``fields``,
        each as :meth:`frozen` or :meth:`entries` gives it (:data:`_UNKNOWN` ones left out)."""
        kept = {k: v for k, v in fields.items() if v is not _UNKNOWN}
        self._put(path, Known(version, kept), sum(_cost(v) for v in kept.values()))

    def wrote(self, path: str, write_pb: Any, version: Version) -> None:
        """A commit this process made wrote ``write_pb`` (a raw ``Write``) at ``path``, which
        is now at ``version``: keep what the document holds, when the write says it exactly
        (a create, a set, or an update fenced on the version kept); else forget it."""
        before = self._known.pop(path, None)
        if before is not None:
            self._known_size -= before.cost
        after = _written(before, write_pb, version)
        if after is not None:
            self._put(path, *after)

    def forget(self, path: str) -> None:
        """Drop what is kept of the document at ``path`` (written some other way)."""
        known = self._known.pop(path, None)
        if known is not None:
            self._known_size -= known.cost

    def thaw(self, known: Known, name: str, decode: Decode) -> Any:
        """The field ``name`` of a document (``known``): its shared value, or, for a map or
        array kept entry by entry, a new one of its shared entries."""
        frozen = known.fields[name]
        kind = type(frozen)
        if kind is _Entries:
            return {key: self._resolved(frozen, key, decode) for key in frozen}
        if kind is _Items:
            return [self._resolved(frozen, i, decode) for i in range(len(frozen))]
        return self._resolved(known.fields, name, decode)

    def _resolved(self, holder: Any, key: Any, decode: Decode) -> Any:
        item = holder[key]
        kind = type(item)
        if kind is _Shared:
            return item.value
        if type(holder) is dict:  # a top-level field written here, not entry by entry
            value = decode(item.pb)
            if isinstance(value, _SHAREABLE):
                holder[key] = _Shared(value, ENTRY_OVERHEAD)
            else:
                del holder[key]  # decoded from the read from now on
            return value
        value, frozen = self.entry(item.pb, decode)
        if frozen is not _UNKNOWN:
            holder[key] = frozen  # an entry written here: decoded once, then shared
        return value

    @staticmethod
    def frozen(value: Any) -> Any:
        """``value`` (a decoded scalar field or entry) as a document keeps it."""
        return _Shared(value, ENTRY_OVERHEAD) if isinstance(value, _SHAREABLE) else _UNKNOWN

    @staticmethod
    def entries(items: dict[str, Any] | list[Any]) -> Any:
        """A top-level map or array field kept entry by entry (:data:`_UNKNOWN` if any is)."""
        if any(v is _UNKNOWN for v in (items.values() if isinstance(items, dict) else items)):
            return _UNKNOWN
        return _Entries(items) if isinstance(items, dict) else _Items(items)

    def _put(self, path: str, known: Known, cost: int) -> None:
        known.cost = cost + ENTRY_OVERHEAD
        if known.cost > self.max_bytes:
            return
        self._known[path] = known
        self._known_size += known.cost
        self._trim()

    def _trim(self) -> None:
        while self.size > self.max_bytes and self._kept:
            self._entries_size -= self._kept.popitem(last=False)[1].cost
        while self.size > self.max_bytes and self._known:
            _, old_known = self._known.popitem(last=False)
            self._known_size -= old_known.cost


def footprint(value: Any) -> int:
    """The memory ``value``'s objects take (``sys.getsizeof`` of each, shared strings counted
    each time)."""
    size = sys.getsizeof(value)
    if isinstance(value, dict):
        for key, item in value.items():
            size += sys.getsizeof(key) + footprint(item)
    elif isinstance(value, list):
        for item in value:
            size += footprint(item)
    return size


def _cost(field: Any) -> int:
    """What a document's field costs to keep (bytes, roughly)."""
    if isinstance(field, _Entries):
        return sum(_cost(i) for i in field.values())
    if isinstance(field, _Items):
        return sum(_cost(i) for i in field)
    if type(field) is _Pending:
        # Decoded, a value takes up to about 8 times its encoded bytes (a content of short
        # strings; long texts about 1.2).
        return int(field.pb.ByteSize()) * 8 + ENTRY_OVERHEAD
    return field.cost if type(field) is _Shared else ENTRY_OVERHEAD


def _written(known: Known | None, pb: Any, version: Version) -> tuple[Known, int] | None:
    """What the document holds after the committed raw ``Write`` ``pb``, from what it held
    before (``known``), and what that costs to keep; None when it is not known exactly."""
    if pb.WhichOneof("operation") != "update" or len(pb.update_transforms):
        return None  # a delete, a transform: the server's to say
    fields = pb.update.fields
    if not pb.HasField("update_mask"):  # a create or a set: the document is what it sent
        sent = {name: _sent(value) for name, value in fields.items()}
        return Known(version, sent), sum(_cost(f) for f in sent.values())
    condition = pb.current_document
    if (known is None or condition.WhichOneof("condition_type") != "update_time"
            or version_key(condition.update_time) != known.version):
        return None  # not fenced on the version kept: what else it holds is not known
    updated, cost = known.fields, known.cost - ENTRY_OVERHEAD
    for path in pb.update_mask.field_paths:
        name, dot, key = path.partition(".")
        if "`" in path or "." in key:
            return None  # a quoted or deeper path: not one the store writes here
        old = updated.pop(name, None)
        value = (fields[name] if not dot else fields[name].map_value.fields.get(key)) \
            if name in fields else None
        if dot and isinstance(old, _Entries) and value is not None:  # an entry set
            replaced = old.get(key)
            last = next(reversed(old), None)
            old[key] = _Pending(value)
            # Entries in their keys' order, as a read decodes a map (an append adds the last).
            updated[name] = old if last is None or key >= last else _Entries(sorted(old.items()))
            cost += _cost(old[key]) - (_cost(replaced) if replaced is not None else 0)
            continue
        cost -= _cost(old) if old is not None else 0
        if not dot and value is not None:  # a field set (in the mask, not sent: deleted)
            updated[name] = _sent(value)
            cost += _cost(updated[name])
        # An entry set in a field not kept entry by entry: the field is decoded from the read.
    return Known(version, updated), cost


def _sent(value: Any) -> Any:
    """A field as a write sent it: entry by entry for a top-level map or array."""
    kind = value.WhichOneof("value_type")
    if kind == "map_value" and not any(k.startswith("__") for k in value.map_value.fields):
        entries = value.map_value.fields
        return _Entries({k: _Pending(entries[k]) for k in sorted(entries)})
    if kind == "array_value":
        return _Items(_Pending(v) for v in value.array_value.values)
    return _Pending(value)


__all__ = ["DecodeCache", "Known", "Version", "version_key"]
