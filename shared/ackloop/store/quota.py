"""The quota room: ``quotas/{quota}-{shard}``, the documents of the model quotas' limiter
(what they hold, and the arithmetic, are :mod:`ackloop.engine.quota_log`'s).

Every write is conditional on the version read (or a create): a change made in between reads
the document again and the change is computed anew (:meth:`Quotas.change`), so two writers never
both build on one reading.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ackloop.docdb.base import AlreadyExists, PreconditionFailed, StorageUnavailable, Write
from ackloop.domain.jsondict import JsonDict
from ackloop.store.base import StoreBase

T = TypeVar("T")
WRITE_ATTEMPTS = 8
"""Conditional writes a change of the document may refuse before the caller is told
(:class:`StorageUnavailable`: the step is redelivered)."""


class Quotas(StoreBase):
    """``quotas/{quota}-{shard}``: the limiter's shards, written at the version read."""

    def shard_path(self, shard_id: str) -> str:
        return f"{self._quotas}/{shard_id}"

    async def read(self, shard_id: str) -> JsonDict | None:
        (snap,) = await self.db.get_all([self.shard_path(shard_id)])
        return snap.data if snap is not None else None

    async def change(self, shard_id: str,
                     change: Callable[[JsonDict | None], tuple[JsonDict | None, T]]) -> T:
        """Read the shard, apply ``change`` to it (its new content, None: nothing to write, and
        what to return), write it at the version read; read again when another writer came
        first."""
        path = self.shard_path(shard_id)
        for _ in range(WRITE_ATTEMPTS):
            (snap,) = await self.db.get_all([path])
            changed, result = change(snap.data if snap is not None else None)
            if changed is None:
                return result
            try:
                if snap is None:
                    await self.db.create(path, changed)
                else:
                    await self.db.commit([Write("update", path, changed,
                                                if_version=snap.version)])
            except (AlreadyExists, PreconditionFailed):
                continue
            return result
        raise StorageUnavailable(f"the quota shard {shard_id} kept changing: {WRITE_ATTEMPTS} "
                                 "writes refused")
