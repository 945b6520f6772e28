"""`ackloop runs list` on Firestore: each filter it queries by has a composite index with
``created_at`` descending, read off the store's own queries (not restated)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, cast

from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.records import RunStatus
from ackloop.store import AgentStore
from tests.infra.terraform import TerraformConfig
from tests.infra.test_sweeper import _declared_indexes

PREFIX = "listed_"


class QueryLog(MemoryDocumentDB):
    """Notes the equality filters and order of every ``list_newest`` query."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[tuple[str, tuple[str, ...], str]] = []

    async def list_newest(self, collection: str, equal: Mapping[str, Any], order_by: str,
                          limit: int = 100, below: Any = None) -> Any:
        self.queries.append((collection, tuple(equal), order_by))
        return await super().list_newest(collection, equal, order_by, limit, below)


def _queries() -> list[tuple[str, tuple[str, ...], str]]:
    db = QueryLog()
    store = AgentStore(cast(Any, db), PREFIX)

    async def every_filter() -> None:
        await store.runs.recent_runs()
        await store.runs.recent_runs(status=RunStatus.RUNNING)
        await store.runs.recent_runs(agent="default")
        await store.runs.recent_runs(conversation_id="c")
        await store.runs.recent_runs(status=RunStatus.FAILED, agent="default", conversation_id="c")
        await store.runs.recent_runs(owner="bearer", status=RunStatus.RUNNING, before=12.5)

    asyncio.run(every_filter())
    return db.queries


def test_every_runs_list_filter_has_an_index_newest_first(terraform: TerraformConfig) -> None:
    declared = _declared_indexes(terraform)
    queries = _queries()
    fields = {name for _, equal, _ in queries for name in equal}
    assert fields == {"status", "agent", "conversation_id", "owner"}
    for collection, equal, order_by in queries:
        assert collection == f"{PREFIX}runs"
        for name in equal:  # several filters: Firestore merges the indexes of each
            needed = ("${var.collection_prefix}runs",
                      ((name, "ASCENDING"), (order_by, "DESCENDING")))
            assert needed in declared, f"no composite index for runs where {name} == ?"
    # One index per filter, none left over.
    assert set(terraform.locals["run_list_filters"].values()) == fields


def test_the_list_of_an_owners_evals_has_its_index(terraform: TerraformConfig) -> None:
    """``GET /evals`` (``store.evals.list_reports``): an owner's reports, the latest started
    first, on an index of its own."""
    db = QueryLog()
    store = AgentStore(cast(Any, db), PREFIX)
    asyncio.run(store.evals.list_reports("bearer", 10, before=12.5))
    assert db.queries == [(f"{PREFIX}evals", ("owner",), "started_at")]
    assert ("${var.collection_prefix}evals", (("owner", "ASCENDING"), ("started_at", "DESCENDING"))
            ) in _declared_indexes(terraform)
