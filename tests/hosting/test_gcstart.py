"""ackloop run collects no cyclic garbage while it starts, then freezes what start-up made and
collects as usual."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from ackloop.hosting import gcstart


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()
    gcstart._paused = False


def test_paused_then_frozen_and_collected_again() -> None:
    gc.enable()
    gc.unfreeze()
    gcstart.pause()
    assert not gc.isenabled()
    gcstart.resume()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    gcstart.resume()  # once only
    assert gc.isenabled()


def test_a_collector_already_off_is_left_off() -> None:
    gc.unfreeze()
    gc.disable()
    gcstart.pause()
    gcstart.resume()
    assert not gc.isenabled()
    assert gc.get_freeze_count() == 0
