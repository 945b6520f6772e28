"""CPU and memory of whole process trees, and of the machine, for the benchmark.

A function process is ``functions-framework`` (a gunicorn master) with a forked uvicorn worker,
so every figure here covers a process *and its live descendants*. Peak memory is Linux's
``VmHWM`` (the high-water mark of the resident set) of each process in the tree, so no sampling
is needed to catch a peak.

The machine is shared: :class:`MachineCpu` measures how busy all cores were, so a phase whose
wall time was stretched by someone else's load shows it (``other_cpu_s``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import psutil


def _tree(pid: int) -> Iterator[psutil.Process]:
    """``pid`` and every live descendant (processes that vanish are skipped)."""
    with contextlib.suppress(psutil.Error):
        root = psutil.Process(pid)
        yield root
        with contextlib.suppress(psutil.Error):
            yield from root.children(recursive=True)


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants (reaped children too)."""
    total = 0.0
    for proc in _tree(pid):
        with contextlib.suppress(psutil.Error):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def peak_rss_bytes(pid: int) -> int:
    """Peak resident set (``VmHWM``) of one process, else its current RSS; 0 if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    with contextlib.suppress(psutil.Error):
        return int(psutil.Process(pid).memory_info().rss)
    return 0


def tree_peak_rss_mib(pid: int) -> dict[str, float]:
    """Peak RSS in MiB of the largest process of the tree and the sum over the tree.

    The sum over-counts pages a fork shares with its parent, so it is an upper bound of what
    the tree needs; ``largest`` is the one process that serves the requests.
    """
    peaks = [peak_rss_bytes(p.pid) for p in _tree(pid)]
    return {
        "largest": round(max(peaks, default=0) / 2**20, 1),
        "tree": round(sum(peaks) / 2**20, 1),
        "processes": len(peaks),
    }


@dataclass
class MachineCpu:
    """Busy CPU seconds of the whole machine (all cores), to tell a contended phase."""

    busy_s: float

    @classmethod
    def now(cls) -> MachineCpu:
        """The machine's busy CPU seconds since boot."""
        t = psutil.cpu_times()
        return cls(float(t.user + t.nice + t.system + t.irq + t.softirq + t.steal))


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process alone (its threads, not its children)."""
    t = psutil.Process().cpu_times()
    return float(t.user + t.system)


class CpuMeter:
    """CPU seconds of named process trees, of this process (``client``) and of the machine
    between :meth:`start` and :meth:`stop`."""

    def __init__(self, pids: Mapping[str, int]) -> None:
        self.pids = dict(pids)
        self._before: dict[str, float] = {}
        self._machine = MachineCpu(0.0)

    def _read(self) -> dict[str, float]:
        readings = {role: tree_cpu_seconds(pid) for role, pid in self.pids.items()}
        readings["client"] = own_cpu_seconds()
        return readings

    def start(self) -> None:
        """Take the starting readings."""
        self._before = self._read()
        self._machine = MachineCpu.now()

    def stop(self) -> dict[str, float]:
        """CPU seconds by role since :meth:`start`, plus ``total``, ``machine`` and ``other``.

        ``other`` is what processes outside this set used meanwhile: the shared machine's
        contention during the phase.
        """
        used = {
            role: round(max(0.0, value - self._before.get(role, 0.0)), 3)
            for role, value in self._read().items()
        }
        total = sum(used.values())
        machine = MachineCpu.now().busy_s - self._machine.busy_s
        return {
            **used,
            "total": round(total, 3),
            "machine": round(machine, 3),
            "other": round(max(0.0, machine - total), 3),
        }
