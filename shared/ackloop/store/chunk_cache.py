"""The transcript chunks' decode cache (:mod:`ackloop.docdb.decode_cache`) of a process.

A model step reads its conversation's last chunk on every turn, and that chunk holds every turn
appended to it so far: only the newest turn is news to a warm process. The Firestore adapter
decodes the documents of the transcript collections through this cache, so what a read decodes
does not grow with the chunk (the read itself still happens: it is the step's consistency
check). What it returns is shared and frozen (:mod:`ackloop.domain.frozen`): no reader changes
the history another reads.
"""

from __future__ import annotations

from ackloop.docdb.decode_cache import DecodeCache

TRANSCRIPT = "transcript"
"""The id of a conversation's chunk collection (:meth:`AgentStore.transcript_collection`)."""


def chunk_decode_cache(max_bytes: int) -> DecodeCache | None:
    """A cache for the transcript chunks' entries of at most ``max_bytes`` (None: 0, none)."""
    return DecodeCache(max_bytes, {TRANSCRIPT}) if max_bytes > 0 else None


__all__ = ["TRANSCRIPT", "chunk_decode_cache"]
