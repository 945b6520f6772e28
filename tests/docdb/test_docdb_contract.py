"""What the engine relies on from a document database, checked on memory and on Firestore."""

from __future__ import annotations

import asyncio

import pytest

from ackloop.docdb.base import AlreadyExists, DocumentDB, PreconditionFailed, Write


async def test_create_is_exclusive(db: DocumentDB, prefix: str) -> None:
    path = f"{prefix}c/doc"
    await db.create(path, {"n": 1})
    with pytest.raises(AlreadyExists):
        await db.create(path, {"n": 2})
    (snap,) = await db.get_all([path])
    assert snap is not None and snap.data == {"n": 1}


async def test_get_all_keeps_order_and_reports_missing(db: DocumentDB, prefix: str) -> None:
    await db.create(f"{prefix}c/b", {"v": "b"})
    found = await db.get_all([f"{prefix}c/missing", f"{prefix}c/b"])
    assert found[0] is None and found[1] is not None and found[1].data == {"v": "b"}


async def test_update_with_stale_version_writes_nothing_in_the_batch(
    db: DocumentDB, prefix: str
) -> None:
    path, other = f"{prefix}c/fenced", f"{prefix}c/other"
    v1 = await db.create(path, {"owner": "a", "keep": True})
    (v2,) = await db.commit([Write("update", path, {"owner": "b"}, if_version=v1)])
    with pytest.raises(PreconditionFailed):
        await db.commit([
            Write("update", path, {"owner": "zombie"}, if_version=v1),
            Write("set", other, {"written": True}),
        ])
    snap, missing = await db.get_all([path, other])
    assert snap is not None and snap.data == {"owner": "b", "keep": True}
    assert snap.version == v2 and missing is None


async def test_update_of_a_missing_document_fails(db: DocumentDB, prefix: str) -> None:
    with pytest.raises(PreconditionFailed):
        await db.commit([Write("update", f"{prefix}c/none", {"x": 1})])


async def test_list_range_by_document_id(db: DocumentDB, prefix: str) -> None:
    col = f"{prefix}runs/r1/steps"
    for key in ["0000-model", "0000-tool-000", "0000-tool-001", "0001-model", "0001-tool-000"]:
        await db.create(f"{col}/{key}", {"key": key})
    found = await db.list_range(col, "0000-tool-", "0001-model")
    assert [s.id for s in found] == ["0000-tool-000", "0000-tool-001", "0001-model"]
    assert (await db.list_all(col))[0].id == "0000-model"
    page = await db.list_range(col, "0000-model", "9999-tool-999", limit=2)
    assert [s.id for s in page] == ["0000-model", "0000-tool-000"]


async def test_list_where_orders(db: DocumentDB, prefix: str) -> None:
    col = f"{prefix}runs"
    for i, conv in enumerate(["a", "b", "a"]):
        await db.create(f"{col}/r{i}", {"conversation_id": conv, "created_at": 10 - i})
    found = await db.list_where(col, "conversation_id", "a", "created_at")
    assert [s.id for s in found] == ["r2", "r0"]


async def test_list_where_orders_a_null_value_first(db: DocumentDB, prefix: str) -> None:
    """The sweeper's queued pass: a run it has not looked at yet (progress_at null) comes
    before the ones it looked at, oldest look first, as Firestore orders null before numbers."""
    col = f"{prefix}runs"
    for name, progress_at in (("seen-late", 30.0), ("unseen", None), ("seen-early", 20.0)):
        await db.create(f"{col}/{name}", {"status": "queued", "progress_at": progress_at})
    found = await db.list_where(col, "status", "queued", "progress_at")
    assert [s.id for s in found] == ["unseen", "seen-early", "seen-late"]


async def test_transactions_serialise_read_modify_write(db: DocumentDB, prefix: str) -> None:
    path = f"{prefix}c/counter"
    await db.create(path, {"n": 0})

    async def increment() -> None:
        async def body(txn):  # type: ignore[no-untyped-def]
            snap = await txn.get(path)
            txn.write(Write("set", path, {"n": snap.data["n"] + 1}))

        await db.transact(body)

    await asyncio.gather(*(increment() for _ in range(3)))
    (snap,) = await db.get_all([path])
    assert snap is not None and snap.data["n"] == 3


async def test_list_newest_filters_on_every_field_and_orders_descending(
    db: DocumentDB, prefix: str
) -> None:
    col = f"{prefix}runs"
    for i, (conv, status) in enumerate([("a", "x"), ("b", "x"), ("a", "y"), ("a", "x")]):
        await db.create(f"{col}/r{i}", {"conversation_id": conv, "status": status,
                                        "created_at": 10 + i})
    await db.create(f"{col}/unordered", {"conversation_id": "a", "status": "x"})
    assert [s.id for s in await db.list_newest(col, {}, "created_at")] == ["r3", "r2", "r1", "r0"]
    found = await db.list_newest(col, {"conversation_id": "a", "status": "x"}, "created_at")
    assert [s.id for s in found] == ["r3", "r0"]
    assert [s.id for s in await db.list_newest(col, {}, "created_at", limit=1)] == ["r3"]


async def test_an_update_sets_keys_inside_a_map_and_keeps_its_others(
    db: DocumentDB, prefix: str
) -> None:
    """``into``: only the named keys of a map change (an append that sends only its entry),
    under the same version precondition as the rest of the update."""
    path = f"{prefix}chunks/c"
    (v1,) = await db.commit([Write("create", path, {"turns": {"t000000": [{"a": 1}]},
                                                    "tail": "x"})])
    (v2,) = await db.commit([Write("update", path, {"tail": "y"}, if_version=v1,
                                   into={"turns": {"t000001": [{"b.c": 2}]}})])
    with pytest.raises(PreconditionFailed):
        await db.commit([Write("update", path, {}, if_version=v1,
                               into={"turns": {"t000001": [{"stale": True}]}})])
    (snap,) = await db.get_all([path])
    assert snap is not None and snap.version == v2
    assert snap.data["turns"] == {"t000000": [{"a": 1}], "t000001": [{"b.c": 2}]}
    assert snap.data["tail"] == "y"
