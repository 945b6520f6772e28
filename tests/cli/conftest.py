"""The ``ackloop`` command as a user runs it: a real subprocess, against the session's emulators.

The subprocess gets no emulator variables: what it talks to comes from the ``state.json`` named by
``--directory``, as after ``ackloop dev up``. ``COLUMNS=40``: a line meant to be pasted must come
out whole even in a narrow terminal.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

from ackloop.docdb.firestore import FirestoreDocumentDB
from ackloop.store import AgentStore
from ackloop.testing.localstack import StackState
from tests.support.emulators import EmulatorSession
from tests.support.stack import RunningStack, stack_factory

T = TypeVar("T")
ACKLOOP = shutil.which("ackloop", path=str(Path(sys.executable).parent)) or "ackloop"
WITHOUT = ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS",
           "GOOGLE_CLOUD_PROJECT")


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell: no emulator variables, no ackloop settings, no Google credentials (an
    empty gcloud config; a metadata server address that refuses at once), 40 columns."""
    env = {k: v for k, v in os.environ.items()
           if k not in WITHOUT and not k.startswith("ACKLOOP_")}
    return env | {"HOME": str(home), "CLOUDSDK_CONFIG": str(home / "gcloud"),
                  "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9",
                  "GCE_METADATA_DETECT_RETRIES": "1",
                  "COLUMNS": "40", "NO_COLOR": "1"} | extra


@dataclass
class Cli:
    home: Path

    def __call__(self, *args: str, timeout: float = 120.0, **env: str
                 ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([ACKLOOP, *args], capture_output=True, text=True, timeout=timeout,
                              env=user_env(self.home, **env), cwd=self.home)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([ACKLOOP, *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=user_env(self.home),
                                cwd=self.home)


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    home = tmp_path / "home"
    home.mkdir()
    return Cli(home)


@dataclass
class FakeStack:
    """A ``state.json`` naming the session's emulators, a project and a collection prefix of its
    own: what ``ackloop dev up`` leaves for the commands, without its processes."""

    directory: Path
    state: StackState

    def store(self) -> AgentStore:
        """A store on its own client: an async Firestore client serves one event loop."""
        return AgentStore(FirestoreDocumentDB.connect(self.state.project_id),
                          self.state.env["ACKLOOP_COLLECTION_PREFIX"])

    def run(self, work: Callable[[AgentStore], Awaitable[T]]) -> T:
        """``work(store)`` in an event loop of its own."""
        return asyncio.run(work(self.store()))


@pytest.fixture
def fake_stack(emulator_session: EmulatorSession, tmp_path: Path) -> FakeStack:
    tag = f"c{uuid.uuid4().hex[:8]}"
    directory = tmp_path / "stack"
    directory.mkdir()
    state = StackState(str(directory), f"{emulator_session.project_id}-{tag}",
                       emulator_session.pubsub_port, emulator_session.firestore_port,
                       env={"ACKLOOP_COLLECTION_PREFIX": f"{tag}_",
                            "ACKLOOP_MODEL_STEPS_TOPIC": f"{tag}-model-steps",
                            "ACKLOOP_ANSWERS_TOPIC": f"{tag}-answers"})
    state.save()
    return FakeStack(directory, state)


@pytest.fixture(scope="module")
def cli_stack(emulator_session: EmulatorSession, tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[RunningStack]:
    """A whole stack (functions, push delivery, scripted model) for ``ackloop ask``."""
    with stack_factory(emulator_session, tmp_path_factory.mktemp("cli-stack")) as make:
        yield make()
