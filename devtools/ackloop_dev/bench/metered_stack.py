"""A local stack whose every function reaches the emulators through counting proxies of its
own (:mod:`ackloop_dev.bench.wire_meter`), the way the step profile and the approval cost
measure: what each service asks of Firestore and Pub/Sub is counted on the wire."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping

from ackloop_dev.bench.wire_meter import WireMeter
from ackloop_dev.devstack.stack import LocalStack

Meters = Mapping[str, tuple[WireMeter, WireMeter]]
"""Per service (and the measuring process's own ``setup``): its Pub/Sub and Firestore meters."""


@contextlib.contextmanager
def environment(**values: str) -> Iterator[None]:
    """This process's environment with ``values`` set, restored afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def service_env(meters: Meters, setup: str) -> dict[str, dict[str, str]]:
    """Per service but ``setup``: the emulator hosts of its own meters."""
    return {name: {"PUBSUB_EMULATOR_HOST": f"127.0.0.1:{pubsub.port}",
                   "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{firestore.port}"}
            for name, (pubsub, firestore) in meters.items() if name != setup}


def start(stack: LocalStack, log: Callable[[str], object]) -> None:
    """Start ``stack``, leaving this process's environment as it was (``up()`` points it at
    the stack; the caller's emulators stay its own)."""
    saved = dict(os.environ)
    try:
        stack.up(log=log)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def stop_meters(meters: Meters) -> None:
    for pair in meters.values():
        for meter in pair:
            meter.stop()
