"""The limiters' room: ``quotas/{quota}-{shard}``, the documents of the model quotas' limiter
(what they hold, and the arithmetic, are :mod:`ackloop.engine.quota_log`'s), and
``slots/{limit}:{key}``, a concurrency limit's slots for one key
(:mod:`ackloop.engine.concurrency`), ``spend/{budget}`` (:mod:`ackloop.engine.spend_limits`),
and ``limits/set``, the limits an operator set while the deployment runs
(:mod:`ackloop.engine.live_limits`).

Every write is conditional on the version read (or a create): a change made in between reads
the document again and the change is computed anew (:meth:`Quotas.change`), so two writers never
both build on one reading.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import TypeVar

from ackloop.docdb.base import AlreadyExists, PreconditionFailed, StorageUnavailable, Write
from ackloop.domain.jsondict import JsonDict
from ackloop.store.base import StoreBase

T = TypeVar("T")
WRITE_ATTEMPTS = 30
"""Conditional writes a change of the document may refuse before the caller is told
(:class:`StorageUnavailable`: the step is redelivered). A burst of steps on one shard (its
slots all come at once when a window opens; a 429 answers many calls together) takes about as
many rounds as it has steps."""
BACKOFF_SECONDS = 0.2
"""The most a refused write waits before it reads again (at random, growing from 5 ms): the
writers of a burst spread out instead of colliding again."""


class Quotas(StoreBase):
    """``quotas/{quota}-{shard}`` and ``slots/{limit}:{key}``: the limiters' documents, written
    at the version read."""

    def shard_path(self, shard_id: str) -> str:
        return f"{self._quotas}/{shard_id}"

    def slots_path(self, slots_id: str) -> str:
        return f"{self._slots}/{slots_id}"

    def spend_path(self, spend_id: str) -> str:
        return f"{self._spend}/{spend_id}"

    async def listed(self, what: str, limit: int = 1000) -> list[tuple[str, JsonDict]]:
        """The documents of one kind (``quotas``, ``slots``, ``spend``), by id: what
        ``ackloop limits`` shows."""
        collection = {"quotas": self._quotas, "slots": self._slots, "spend": self._spend}[what]
        return [(snap.id, snap.data) for snap in await self.db.list_all(collection, limit)]

    async def read_spend(self, spend_ids: list[str]) -> list[JsonDict | None]:
        """Several budgets' documents, in one read."""
        found = await self.db.get_all([self.spend_path(i) for i in spend_ids])
        return [snap.data if snap is not None else None for snap in found]

    async def change_spend(self, spend_id: str,
                           change: Callable[[JsonDict | None], tuple[JsonDict | None, T]]
                           ) -> T:
        """:meth:`change` for a budget's document."""
        return await self._change(self.spend_path(spend_id), change)

    async def read_set(self) -> JsonDict | None:
        """``limits/set``: the limits an operator set while the deployment runs
        (:mod:`ackloop.engine.live_limits`), or None."""
        (snap,) = await self.db.get_all([f"{self._limits}/set"])
        return snap.data if snap is not None else None

    async def change_set(self, change: Callable[[JsonDict | None], tuple[JsonDict | None, T]]
                         ) -> T:
        """:meth:`change` for ``limits/set``."""
        return await self._change(f"{self._limits}/set", change)

    async def read_shards(self, shard_ids: list[str]) -> list[JsonDict | None]:
        """Several shards' documents, in one round trip."""
        found = await self.db.get_all([self.shard_path(i) for i in shard_ids])
        return [snap.data if snap is not None else None for snap in found]

    async def read(self, shard_id: str) -> JsonDict | None:
        (snap,) = await self.db.get_all([self.shard_path(shard_id)])
        return snap.data if snap is not None else None

    async def change(self, shard_id: str,
                     change: Callable[[JsonDict | None], tuple[JsonDict | None, T]]) -> T:
        """Read the shard, apply ``change`` to it (its new content, None: nothing to write, and
        what to return), write it at the version read; read again when another writer came
        first."""
        return await self._change(self.shard_path(shard_id), change)

    async def change_slots(self, slots_id: str,
                           change: Callable[[JsonDict | None], tuple[JsonDict | None, T]]
                           ) -> T:
        """:meth:`change` for a key's slots."""
        return await self._change(self.slots_path(slots_id), change)

    async def _change(self, path: str,
                      change: Callable[[JsonDict | None], tuple[JsonDict | None, T]]) -> T:
        for attempt in range(WRITE_ATTEMPTS):
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
                await asyncio.sleep(random.uniform(0.0, min(BACKOFF_SECONDS,
                                                            0.005 * 2 ** attempt)))
                continue
            return result
        raise StorageUnavailable(f"the limiter's document {path} kept changing: "
                                 f"{WRITE_ATTEMPTS} writes refused")
