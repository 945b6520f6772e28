"""SIGKILLs at commit boundaries: arm a fault point, see the process die, restart it, and
record which steps were in flight at that moment.

A step counts as in flight at a kill when the killed process held its live lease, or when it
had just committed in that process without its follow-up being claimed yet (the
``after_commit`` points: committed, never published).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from ackloop.domain.records import StepRecord, StepStatus
from ackloop_dev.chaos.stackup import ChaosStack

log = logging.getLogger(__name__)

SERVICE_OF = {"model": "model_step", "tool": "tool_step"}
COMMIT_WINDOW_S = 2.0


@dataclass
class KillEvent:
    """One SIGKILL and what it interrupted."""

    point: str
    service: str
    pids: set[int]
    """The killed process and its children (the server's workers own the leases)."""
    killed_at: float
    restart_s: float = 0.0
    in_flight: list[tuple[str, str]] = field(default_factory=list)
    """(run id, step key) of every step in flight in the killed process."""

    @property
    def runs(self) -> set[str]:
        return {run for run, _ in self.in_flight}


def owner_pid(owner: str) -> int | None:
    """The pid in an owner id (``host:pid:nonce``)."""
    parts = owner.split(":")
    return int(parts[-2]) if len(parts) >= 3 and parts[-2].isdigit() else None


def interrupted(steps: list[StepRecord], pids: set[int], killed_at: float, after_commit: bool
                ) -> list[str]:
    """Keys of a run's steps that the kill of ``pids`` interrupted (see the module docstring)."""
    keys = [s.key for s in steps if owner_pid(s.owner) in pids
            and s.status is StepStatus.RUNNING and s.lease_expires_at > killed_at]
    if after_commit and steps:
        last = max(steps, key=lambda s: s.key)
        if (last.status is StepStatus.COMPLETED and owner_pid(last.owner) in pids
                and killed_at - COMMIT_WINDOW_S <= (last.completed_at or 0.0) <= killed_at + 0.5):
            keys.append(last.key)
    return keys


class KillMonitor:
    """Arms one fault point at a time, detects the kill, restarts, records a :class:`KillEvent`."""

    def __init__(self, stack: ChaosStack, plan: list[str],
                 in_flight_runs: Callable[[], list[str]]) -> None:
        self.stack = stack
        self.plan = list(plan)
        self.events: list[KillEvent] = []
        self.unexpected_exits: list[str] = []
        self.armed: str | None = None
        self._in_flight_runs = in_flight_runs
        self._pids = {name: self._pid(name) for name in SERVICE_OF.values()}

    def _pid(self, name: str) -> set[int]:
        pid = self.stack.stack.processes[name].pid
        assert pid is not None
        try:
            return {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        except psutil.Error:
            return {pid}

    @property
    def remaining(self) -> int:
        return len(self.plan) + (1 if self.armed else 0)

    def arm_next(self) -> bool:
        """Arm the next planned point unless one is armed already."""
        if self.armed is not None or not self.plan:
            return False
        self.armed = self.plan.pop(0)
        self.stack.arm(self.armed)
        log.info("armed %s", self.armed)
        return True

    async def check(self) -> KillEvent | None:
        """If a watched process died, handle it; return the kill event (None if nothing died)."""
        for name in SERVICE_OF.values():
            proc = self.stack.stack.processes[name].process
            if proc is None or proc.poll() is None:
                continue
            return await self._handle_exit(name)
        return None

    async def _handle_exit(self, name: str) -> KillEvent | None:
        pids = self._pids[name]
        point = self.armed
        if point is None or SERVICE_OF[point.split(":")[0]] != name:
            self.unexpected_exits.append(name)
            await asyncio.to_thread(self.stack.restart, name)
            self._pids[name] = self._pid(name)
            return None
        killed_at = self.stack.marker_time(point) or time.time()
        restart = asyncio.create_task(asyncio.to_thread(self.stack.restart, name))
        event = KillEvent(point, name, pids, killed_at)
        event.in_flight = await self._snapshot(pids, killed_at, point.endswith("after_commit"))
        event.restart_s = await restart
        self._pids[name] = self._pid(name)
        self.armed = None
        self.events.append(event)
        log.info("kill at %s: pids %s, %d step(s) in flight, restarted in %.1f s",
                 point, sorted(pids), len(event.in_flight), event.restart_s)
        return event

    async def _snapshot(self, pids: set[int], killed_at: float, after_commit: bool
                        ) -> list[tuple[str, str]]:
        store = self.stack.store()
        runs = self._in_flight_runs()
        all_steps = await asyncio.gather(*(store.list_steps(run) for run in runs))
        return [(run, key) for run, steps in zip(runs, all_steps, strict=True)
                for key in interrupted(steps, pids, killed_at, after_commit)]


def kill_plan(points: tuple[str, ...], per_point: int) -> list[str]:
    """Every point ``per_point`` times, interleaved (call->commit, then commit->publish...)."""
    return [point for _ in range(per_point) for point in points]
