"""Retention: every collection group the store writes has a Firestore TTL policy on the field
the store writes (``expire_at``), and retention_days is a variable with the code's default that
turns the policies off at 0."""

from __future__ import annotations

import asyncio

from ackloop.config.settings import Settings
from ackloop.docdb.memory import MemoryDocumentDB
from ackloop.domain.eval_reports import CaseResult, EvalReport
from ackloop.domain.keys import StepKey
from ackloop.domain.records import ReceivedEvent, RunLimits, RunRecord
from ackloop.store import EXPIRE_AT, AgentStore, Retention
from ackloop.store.deltas import DeltaWriter, delta_expiry, deltas_collection
from ackloop.store.transcript import append_writes
from tests.infra.terraform import TerraformConfig, block, expression

PREFIX = "pfx_"


async def _write_every_kind(store: AgentStore) -> None:
    run = RunRecord(run_id="r", request_id="q", request_hash="h", conversation_id="c",
                    agent="default", text="hi", model="m", created_at=1.0,
                    limits=RunLimits(max_steps=1, max_seconds=1, max_tool_calls=1))
    await store.runs.create_run(run)
    await store.steps.claim_step("r", StepKey.model(0), "model", owner="o", now=1.0,
                                 lease_seconds=1)
    transcript = await store.transcript.load_transcript("c")
    await store.db.commit(append_writes(store, transcript, [{"a": 1}], "r/0", now=1.0))
    await store.letters.record_poison("p", {"received_at": 1.0})
    await store.letters.record_dead_letter("d", {"data": "", "received_at": 1.0})
    deltas = DeltaWriter(store.db, deltas_collection(store, "r"), "0000-model", 1,
                         flush_seconds=0.05, expire_at=delta_expiry(store, 1.0))
    deltas.add("a piece of text")
    await deltas.close()
    await store.waits.receive_event("r", "signed",
                                    ReceivedEvent(payload={"ok": True}, by="o", at=1.0))
    await store.evals.put_report(EvalReport(eval_id="e", name="n", cases=[CaseResult(name="c")]),
                                 "o", now=1.0)


def collection_groups_the_store_writes() -> dict[str, bool]:
    """Collection group (the top-level ones with Terraform's prefix expression) -> whether its
    documents carry expire_at, from what the store really writes."""
    db = MemoryDocumentDB()
    asyncio.run(_write_every_kind(AgentStore(db, PREFIX, Retention(86_400.0, 3600.0))))
    groups: dict[str, bool] = {}
    for path in db._docs:  # every document written, whatever its path
        group = path.split("/")[-2]
        if group.startswith(PREFIX):
            group = "${var.collection_prefix}" + group.removeprefix(PREFIX)
        (snap,) = asyncio.run(db.get_all([path]))
        assert snap is not None
        groups[group] = groups.get(group, True) and EXPIRE_AT in snap.data
    return groups


def test_every_collection_group_the_store_writes_has_a_ttl_policy(
    terraform: TerraformConfig,
) -> None:
    written = collection_groups_the_store_writes()
    assert set(written) >= {"${var.collection_prefix}runs", "steps",
                            "${var.collection_prefix}conversations", "transcript",
                            "${var.collection_prefix}poison",
                            "${var.collection_prefix}dead_letters", "deltas", "events",
                            "${var.collection_prefix}evals", "cases"}, written
    # Runs carry expire_at once they end; every other kind from its first write.
    assert all(has for group, has in written.items() if not group.endswith("runs")), written

    field = terraform.resource("google_firestore_field", "expire_at")
    assert field["collection"] == "${each.value}"
    assert field["field"] == EXPIRE_AT
    assert block(field, "ttl_config") == {}, "the TTL policy is the ttl_config block"
    assert block(field, "index_config") == {}, "no single-field index on a field nobody queries"
    assert field["database"] == "${local.firestore_database}"
    policies = set(terraform.locals["expiring_collection_groups"].values())
    assert policies == set(written), (
        f"collection groups without a TTL policy: {sorted(set(written) - policies)}; "
        f"policies on groups the store never writes: {sorted(policies - set(written))}")


def test_retention_days_turns_the_policies_off_at_zero(terraform: TerraformConfig) -> None:
    field = terraform.resource("google_firestore_field", "expire_at")
    assert expression(field["for_each"]) == (
        "var.retention_days > 0 ? local.expiring_collection_groups : {}")
    assert terraform.variable_default("retention_days") == Settings().retention_days == 30
    assert Retention.from_settings(Settings(retention_days=0)) is None
