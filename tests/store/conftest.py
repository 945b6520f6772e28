"""The contract suite runs against both DocumentDB adapters: memory and the Firestore emulator."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ackloop.docdb.base import DocumentDB
from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.store import AgentStore


@pytest.fixture(params=["memory", pytest.param("firestore", marks=pytest.mark.emulator)])
async def db(request: pytest.FixtureRequest) -> AsyncIterator[DocumentDB]:
    if request.param == "memory":
        yield MemoryDocumentDB()
        return
    session = request.getfixturevalue("emulator_session")
    yield FirestoreDocumentDB.connect(session.project_id)


@pytest.fixture
def prefix() -> str:
    """Every test writes under its own collection prefix: no reset needed between tests."""
    return f"t{uuid.uuid4().hex[:10]}_"


@pytest.fixture
def store(db: DocumentDB, prefix: str) -> AgentStore:
    return AgentStore(db, prefix)
