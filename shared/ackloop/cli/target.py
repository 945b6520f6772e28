"""Which deployment a command talks to: the local stack in ``--directory``, else the environment.

``ackloop dev up`` records its emulators, project, topics and collection prefix in
``state.json``; every command that reads or writes runs loads it from ``--directory`` so that it
sees exactly that stack. Without a stack there, the settings come from the environment
(``ACKLOOP_*``, ``PUBSUB_EMULATOR_HOST``/``FIRESTORE_EMULATOR_HOST``, or Google Cloud's default
credentials). What cannot work is said in one line before any client is built.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ackloop.cli.errors import NO_CREDENTIALS, CliError
from ackloop.config.settings import Settings
from ackloop.testing.localstack import DEFAULT_DIRECTORY

if TYPE_CHECKING:
    from ackloop.bus.pubsub import PubSubPublisher
    from ackloop.engine.deps import Deps
    from ackloop.model.base import ModelRequest, ModelTurn
    from ackloop.store import AgentStore
    from ackloop.testing.localstack import StackState

EMULATORS = {"PUBSUB_EMULATOR_HOST": "Pub/Sub", "FIRESTORE_EMULATOR_HOST": "Firestore"}
REACH_SECONDS = 1.0


DIRECTORY: Path = typer.Option(
    DEFAULT_DIRECTORY, "--directory",
    help="The local stack's directory (`ackloop dev up --directory`); without a stack there, "
    "the deployment the environment names.")
"""``--directory``, the same on every command that reads or writes runs."""


@dataclass(frozen=True)
class Target:
    settings: Settings
    stack: StackState | None
    """The local stack the command talks to, if any."""

    def store(self) -> AgentStore:
        from ackloop.docdb.firestore import FirestoreDocumentDB
        from ackloop.store import AgentStore, Retention

        settings = self.settings
        db = FirestoreDocumentDB.connect(settings.project_id, settings.firestore_database)
        return AgentStore(db, settings.collection_prefix, Retention.from_settings(settings))

    def publisher(self) -> PubSubPublisher:
        from ackloop.bus.pubsub import PubSubPublisher

        return PubSubPublisher(self.settings.project_id)

    async def engine_deps(self) -> Deps:
        """What cancel, approve, reject, send-event, sweep, the schedules and the evals' store
        use of the engine: the store, the publisher and the clock.

        None reads an agent nor calls a model, so the command loads no agent catalog (the
        user's package need not be importable where the CLI runs) and starts no service: it
        logs nothing of a process start-up, and a model call through these dependencies is a
        bug.
        """
        from ackloop.agents.agent import AgentRegistry
        from ackloop.domain.clock import SystemClock
        from ackloop.engine.deps import Deps

        return Deps(settings=self.settings, store=self.store(), publisher=self.publisher(),
                    model=_NoModel(), agents=AgentRegistry(), clock=SystemClock(),
                    owner=f"cli:{socket.gethostname()}:{os.getpid()}")


class _NoModel:
    """The model of the CLI's dependencies: these commands never call one."""

    provider = "none"

    async def generate(self, request: ModelRequest) -> ModelTurn:
        raise RuntimeError("the ackloop CLI calls no model")


def connect(directory: Path) -> Target:
    """The settings of the stack in ``directory`` (put in this process's environment, where the
    Google clients read the emulators from), or of the environment; checked reachable."""
    from ackloop.testing.localstack import StackState

    try:
        state = StackState.load(directory)
    except (OSError, ValueError, TypeError) as exc:
        raise CliError(f"{directory / 'state.json'} is not a stack's state ({exc}); "
                       "`ackloop dev down` then `ackloop dev up` writes a new one") from exc
    if state is not None:
        os.environ.update(state.client_env())
        os.environ.update({k: v for k, v in state.env.items() if k.startswith("ACKLOOP_")})
    emulated = [name for name in EMULATORS if os.environ.get(name)]
    if emulated:
        for name in emulated:
            _reachable(name, os.environ[name], directory if state else None)
    else:
        settings = Settings()
        typer.echo(f"no local stack in {directory} and no emulator variables: using project "
                   f"{settings.project_id} with your Google Cloud credentials", err=True)
        _credentials(directory)
    return Target(Settings(), state)


def _reachable(variable: str, address: str, directory: Path | None) -> None:
    host, _, port = address.rpartition(":")
    where = (f"the stack in {directory} (`ackloop dev status --directory {directory}`)"
             if directory else f"{variable}")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=REACH_SECONDS):
            return
    except (OSError, ValueError) as exc:
        raise CliError(f"the {EMULATORS[variable]} emulator at {address} is not reachable "
                       f"({exc}); named by {where}: is the stack up?") from exc


def _credentials(directory: Path) -> None:
    """Without emulators, a deployment: its default credentials must exist."""
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        google.auth.default()
    except DefaultCredentialsError as exc:
        raise CliError(NO_CREDENTIALS.replace("no local stack",
                                              f"no local stack in {directory}", 1)) from exc
