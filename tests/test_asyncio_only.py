"""A starting service does without trio (ackloop.hosting.asyncio_only): httpcore finds it
absent while the process starts, and code imported once it has started finds it installed."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("trio")  # installed with the development tools (selenium)


def _run(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_httpcore_started_without_trio_and_trio_imports_after() -> None:
    out = _run(
        "import sys\n"
        "from ackloop.hosting import asyncio_only\n"
        "asyncio_only.hide()\n"
        "import httpcore._synchronization as s\n"
        "print(s.trio is None, 'trio._core' in sys.modules)\n"
        "asyncio_only.show()\n"
        "import trio\n"
        "print(trio.__name__)\n")
    assert out.splitlines() == ["True False", "trio"]


def test_a_trio_already_imported_is_left_alone() -> None:
    out = _run(
        "import sys, trio\n"
        "from ackloop.hosting import asyncio_only\n"
        "asyncio_only.hide()\n"
        "print(sys.modules['trio'] is trio)\n"
        "asyncio_only.show()\n"
        "print(sys.modules['trio'] is trio)\n")
    assert out.splitlines() == ["True", "True"]
