"""The emulators for a test session: reused from the environment, or started here."""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from ackloop_dev.devstack import emulators
from ackloop_dev.devstack.processes import ManagedProcess

PROJECT = "ackloop-test"


@dataclass
class EmulatorSession:
    pubsub_port: int
    firestore_port: int
    directory: Path
    project_id: str = PROJECT
    started: list[ManagedProcess] = field(default_factory=list)

    @classmethod
    def start(cls, directory: Path) -> EmulatorSession:
        pubsub = os.environ.get("PUBSUB_EMULATOR_HOST")
        firestore = os.environ.get("FIRESTORE_EMULATOR_HOST")
        if pubsub and firestore:
            return cls(int(pubsub.rsplit(":", 1)[1]), int(firestore.rsplit(":", 1)[1]), directory)
        jars = emulators.find_jars()
        ps_port, fs_port = emulators.free_port(), emulators.free_port()
        procs = [
            emulators.pubsub_process(jars, ps_port, directory).start(),
            emulators.firestore_process(jars, fs_port, directory).start(),
        ]
        session = cls(ps_port, fs_port, directory, started=procs)
        try:
            for proc in procs:
                proc.wait_ready(60.0)
        except BaseException:
            session.stop()
            raise
        os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{ps_port}"
        os.environ["FIRESTORE_EMULATOR_HOST"] = f"127.0.0.1:{fs_port}"
        return session

    def stop(self) -> None:
        for proc in self.started:
            proc.stop()

    @staticmethod
    def unique(prefix: str) -> str:
        """A name no other test uses (Pub/Sub has no reset: isolate by name)."""
        return f"{prefix}-{uuid.uuid4().hex[:8]}"
