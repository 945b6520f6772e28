"""Tracing on, to trace files in a fresh directory, for one test; off again afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ackloop.telemetry import tracing


@pytest.fixture
def traces(tmp_path: Path) -> Iterator[Path]:
    directory = tmp_path / "traces"
    assert tracing.configure("file", str(directory), "ackloop-test") == "file"
    try:
        yield directory
    finally:
        tracing.configure("none", None, "ackloop-test")


def all_spans(directory: Path) -> list[dict[str, object]]:
    """Every span in the directory's files, once what has ended is exported (in batches)."""
    import json

    tracing.force_flush()
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text().splitlines()]
