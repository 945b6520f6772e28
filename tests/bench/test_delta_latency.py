"""The delta latency bench times each delta against the chunk that completed its text."""

from __future__ import annotations

import pytest

from ackloop_dev.bench.delta_latency import latencies


def test_each_delta_is_timed_from_the_last_chunk_whose_text_it_carries() -> None:
    chunks: list[dict[str, float | str]] = [
        {"at": 10.0, "text": "The "}, {"at": 10.1, "text": "harbour "},
        {"at": 10.2, "text": "was "}, {"at": 10.3, "text": "quiet."}]
    # The writer batched: first piece alone, then two chunks, then the last.
    deltas = [("The ", 10.25), ("harbour was ", 10.6), ("quiet.", 10.45)]
    assert latencies(chunks, deltas) == pytest.approx([0.25, 0.4, 0.15])
