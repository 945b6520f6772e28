"""The contract suite runs against both DocumentDB adapters: memory and the Firestore emulator."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ackloop.docdb.base import DocumentDB
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.store import AgentStore
from ackloop.store.chunk_cache import chunk_decode_cache


@pytest.fixture(params=["memory", pytest.param("firestore", marks=pytest.mark.emulator),
                        pytest.param("firestore_cached", marks=pytest.mark.emulator)])
async def db(request: pytest.FixtureRequest) -> AsyncIterator[DocumentDB]:
    """``firestore_cached``: the adapter as a deployment builds it, decoding the transcript's
    chunks through a decode cache (:mod:`ackloop.store.chunk_cache`)."""
    if request.param == "memory":
        yield MemoryDocumentDB()
        return
    session = request.getfixturevalue("emulator_session")
    cache = chunk_decode_cache(1 << 20) if request.param == "firestore_cached" else None
    yield FirestoreDocumentDB.connect(session.project_id, decode_cache=cache)


@pytest.fixture
def prefix() -> str:
    """Every test writes under its own collection prefix: no reset needed between tests."""
    return f"t{uuid.uuid4().hex[:10]}_"


@pytest.fixture
def store(db: DocumentDB, prefix: str) -> AgentStore:
    return AgentStore(db, prefix)
