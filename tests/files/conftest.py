"""The Cloud Storage emulator for the file store's tests: the one ``STORAGE_EMULATOR_HOST``
names (``ackloop dev up`` prints it, CI exports it), else gcp-storage-emulator started here.
If it cannot start, its tests are SKIPPED saying why, loudly; under CI=true they fail."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ackloop_dev.devstack import emulators
from ackloop_dev.devstack.processes import ManagedProcess


def _unavailable(why: str) -> None:
    message = f"!!! Cloud Storage emulator tests SKIPPED: {why}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the Cloud Storage emulator is required under CI: {why}")
    pytest.skip(message)


@pytest.fixture(scope="session")
def storage_host() -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a running Cloud Storage emulator."""
    if host := os.environ.get("STORAGE_EMULATOR_HOST"):
        yield host
        return
    if (why := emulators.storage_available()) is not None:
        _unavailable(why)
    directory = Path(tempfile.mkdtemp(prefix="ackloop-storage-"))
    port = emulators.free_port()
    process: ManagedProcess = emulators.storage_process(port, directory, directory / "data")
    try:
        process.start().wait_ready(30.0)
    except Exception as exc:
        process.stop()
        _unavailable(f"gcp-storage-emulator did not start: {exc}")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()
