"""One emulator test and one unit test that need nothing: what tests/test_tier_gates.py runs
pytest on (by path: no ``test_`` prefix, the suite never collects it itself)."""

from __future__ import annotations

import pytest


@pytest.mark.emulator
def test_an_emulator_test() -> None:
    assert True


def test_a_unit_test() -> None:
    assert True
