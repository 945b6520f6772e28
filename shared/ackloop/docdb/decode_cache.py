"""Decoding each turn of a transcript chunk once per process, not once per read.

A model step reads its conversation's last transcript chunk on every turn, and every turn
before it has appended to that chunk: the chunk's version is new on each read, but all of it
but the last turn is what the previous read already decoded. Decoding a Firestore document
(its raw ``Value`` messages into Python values, :mod:`ackloop.docdb.firestore_codec`) is the
part of a read that grows with the chunk (about 1.5 ms for the 50 turns of a 101-step run,
against 0.1 ms for the gRPC layer's parse of the same bytes), so a warm process keeps what it
decoded, keyed by the exact encoded bytes of each entry:

* **Keyed by content.** An entry is one value of a top-level map or array field of an admitted
  document (a chunk's turn in ``turns``, a content of ``contents`` or ``kept``), keyed by its
  ``Value`` message serialized deterministically. Equal bytes decode to equal values, so a hit
  is exact whatever the document's version, whoever wrote it and whatever happened to the
  document in between (an entry changed, or the chunk deleted and written again, is other
  bytes: a miss, decoded afresh). The version alone would not do: the chunk read is always at
  a version no read of this process has seen (the previous step's append made it).
* **Never shared.** What is kept is the entry's value in ``marshal``'s format 2; each hit is
  ``marshal.loads`` of it (C code: about half of ``json.loads`` of the same value, which this
  cache kept first, and a small part of decoding the message), so every caller gets values of
  its own, and nothing a caller does to them reaches the cache or another caller. marshal
  carries exactly the plain values a chunk holds (strings, numbers, booleans, None, bytes,
  maps and arrays of them); an entry holding anything else (a timestamp, a reference...) is
  not kept.
* **Bounded.** Least recently used entries go first once the encoded keys and kept values
  together pass ``max_bytes`` (``ACKLOOP_DECODE_CACHE_BYTES``; 0: no cache).
"""

from __future__ import annotations

import marshal
from collections import OrderedDict
from collections.abc import Callable, Collection
from typing import Any

ENTRY_OVERHEAD = 200
"""Bytes counted per kept entry besides its key and value (the objects that hold them)."""

_FORMAT = 2
"""marshal's format 2: a value's bytes without back-references (format 3 on), whatever objects
it shares."""


class DecodeCache:
    """Decoded entries of the documents of some collections, by their encoded bytes."""

    def __init__(self, max_bytes: int, collections: Collection[str]) -> None:
        self.max_bytes = max_bytes
        self.collections = frozenset(collections)
        self._kept: OrderedDict[bytes, bytes] = OrderedDict()
        self.size = 0
        """Bytes counted now (keys, kept values and :data:`ENTRY_OVERHEAD` each)."""
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._kept)

    def admits(self, path: str) -> bool:
        """Whether the document at ``path`` is decoded through the cache: it is in one of
        :attr:`collections` (the id of its parent collection)."""
        parts = path.rsplit("/", 2)
        return len(parts) == 3 and parts[1] in self.collections

    def decoded(self, pb: Any, decode: Callable[[Any], Any]) -> Any:
        """The value of the raw ``Value`` ``pb``: decoded by ``decode``, or, when the same
        bytes were decoded before, a fresh copy of what that gave."""
        raw: bytes = pb.SerializeToString(deterministic=True)
        kept = self._kept.get(raw)
        if kept is not None:
            self._kept.move_to_end(raw)
            self.hits += 1
            return marshal.loads(kept)
        self.misses += 1
        value = decode(pb)
        self._keep(raw, value)
        return value

    def _keep(self, raw: bytes, value: Any) -> None:
        try:
            kept = marshal.dumps(value, _FORMAT)
        except ValueError:
            return  # a timestamp, a reference...: decoded every time
        cost = len(raw) + len(kept) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return
        self._kept[raw] = kept
        self.size += cost
        while self.size > self.max_bytes:
            old, old_kept = self._kept.popitem(last=False)
            self.size -= len(old) + len(old_kept) + ENTRY_OVERHEAD


__all__ = ["DecodeCache"]
