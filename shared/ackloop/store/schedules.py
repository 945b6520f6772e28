"""The schedules room: ``schedules/{id}``, one document per schedule
(:class:`~ackloop.domain.schedules.ScheduleRecord`: its spec, source and digest, when it fires
next, whether it is paused, its last run and its recent firings), and ``schedules/_catalog``:
the digests of the catalog's schedules as last synced, so that a sweep whose catalog has not
changed reads one document for it.

Every write is conditional: a record is created only where none is, and replaced only at the
version it was read at (:class:`ScheduleChanged` otherwise: the caller reads it again). A
deleted schedule stays as a tombstone (``deleted``, with its ``expire_at``) that a firing
still in flight reads as gone.

The due query (:meth:`Schedules.due`): ``active == true`` (not paused, not deleted, not over)
with ``next_fire_at`` below a time, the latest first: a composite index (infra/firestore.tf,
``schedules_due``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ackloop.docdb.base import AlreadyExists, PreconditionFailed, Version, Write
from ackloop.domain.errors import RetryableError
from ackloop.domain.jsondict import JsonDict
from ackloop.domain.schedules import ScheduleRecord
from ackloop.store.base import StoreBase

CATALOG_DOCUMENT = "_catalog"
"""The catalog's digests (no schedule id starts with ``_``)."""
DUE_PAGE = 500
LIST_LIMIT = 1000


class ScheduleChanged(RetryableError):
    """The schedule's document changed (or appeared) since it was read."""


@dataclass(frozen=True)
class StoredSchedule:
    record: ScheduleRecord
    version: Version


@dataclass(frozen=True)
class CatalogSynced:
    """The catalog's schedules as last synced: id → the spec's digest."""

    digests: dict[str, str]
    version: Version | None


class Schedules(StoreBase):
    """``schedules/{id}``: the schedules' records, written at the version read."""

    def schedule_path(self, schedule_id: str) -> str:
        return f"{self._schedules}/{schedule_id}"

    def _document(self, record: ScheduleRecord, now: float) -> JsonDict:
        data: JsonDict = record.model_dump(mode="json")
        data["active"] = record.active
        if record.deleted:
            data |= self._expiry(now)
        return data

    async def read(self, *schedule_ids: str) -> list[StoredSchedule | None]:
        """The schedules' records (deleted ones among them), in the order asked."""
        snaps = await self.db.get_all([self.schedule_path(i) for i in schedule_ids])
        return [None if snap is None else
                StoredSchedule(ScheduleRecord.model_validate(snap.data), snap.version)
                for snap in snaps]

    async def write(self, record: ScheduleRecord, version: Version | None, now: float
                    ) -> Version:
        """Create the record (``version`` None: none may exist) or replace it at ``version``.
        Raises :class:`ScheduleChanged`."""
        path = self.schedule_path(record.id)
        data = self._document(record, now)
        write = (Write("create", path, data) if version is None
                 else Write("update", path, data, if_version=version))
        try:
            (written,) = await self.db.commit([write])
        except (AlreadyExists, PreconditionFailed) as exc:
            raise ScheduleChanged(f"schedule {record.id} changed meanwhile") from exc
        return written

    async def due(self, before: float, limit: int = DUE_PAGE) -> list[ScheduleRecord]:
        """Active schedules whose next firing is before ``before`` (one query)."""
        snaps = await self.db.list_newest(self._schedules, {"active": True}, "next_fire_at",
                                          limit, before)
        return [ScheduleRecord.model_validate(s.data) for s in snaps]

    async def listing(self, limit: int = LIST_LIMIT) -> list[ScheduleRecord]:
        """Every schedule not deleted, by id."""
        snaps = await self.db.list_all(self._schedules, limit)
        records = [ScheduleRecord.model_validate(s.data) for s in snaps
                   if s.id != CATALOG_DOCUMENT]
        return [r for r in records if not r.deleted]

    async def catalog(self) -> CatalogSynced:
        """The catalog's digests as last synced (none yet: empty, no version)."""
        (snap,) = await self.db.get_all([self.schedule_path(CATALOG_DOCUMENT)])
        if snap is None:
            return CatalogSynced({}, None)
        digests: Any = snap.data.get("digests") or {}
        return CatalogSynced({str(k): str(v) for k, v in digests.items()}, snap.version)

    async def write_catalog(self, digests: dict[str, str], version: Version | None,
                            now: float) -> None:
        """Record the catalog as synced, at the version read (:class:`ScheduleChanged`)."""
        path = self.schedule_path(CATALOG_DOCUMENT)
        data: JsonDict = {"digests": digests, "synced_at": now}
        write = (Write("create", path, data) if version is None
                 else Write("update", path, data, if_version=version))
        try:
            await self.db.commit([write])
        except (AlreadyExists, PreconditionFailed) as exc:
            raise ScheduleChanged("the catalog's schedules were synced meanwhile") from exc
