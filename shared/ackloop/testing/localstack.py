"""The local stack's state file: where ``ackloop dev up`` recorded its emulators, ports and
environment, and how any command reads it.

The stack itself (``ackloop dev``) comes with the development tools, but ``ackloop ask`` and
``ackloop runs`` find its emulators with the runtime alone, so the file's one definition lives
here and the stack writes it through the same class.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

DEFAULT_DIRECTORY = Path(".ackloop/dev")
STATE_FILE = "state.json"


@dataclass
class StackState:
    directory: str
    project_id: str
    pubsub_port: int
    firestore_port: int
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    model_provider: str = "scripted"
    model: str = ""
    """The model the functions use, in words."""
    sandbox_url: str | None = None
    fake_gemini_url: str | None = None
    urls: dict[str, str] = field(default_factory=dict)
    """Each process's health URL."""
    logs: dict[str, str] = field(default_factory=dict)
    storage_port: int | None = None
    """The Cloud Storage emulator's port, where file bytes are kept (None: no emulator; the
    functions then keep files in memory, which only works within one process)."""
    files_bucket: str | None = None
    """The bucket on it (``ACKLOOP_FILES_BUCKET``)."""
    agents: str | None = None
    """The agent catalog the functions serve (their ``ACKLOOP_AGENTS``; None: a state written
    before the stack recorded it)."""
    python_path: list[str] = field(default_factory=list)
    """The directories ahead on the functions' import path, whence they import the catalog
    (``dev up``'s current directory and its ``--path``)."""

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['api']}"

    def client_env(self) -> dict[str, str]:
        """What a client (``ackloop ask``, a test) needs to talk to this stack."""
        env = {
            "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{self.pubsub_port}",
            "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{self.firestore_port}",
            "ACKLOOP_PROJECT_ID": self.project_id,
        }
        return env | self.storage_env()

    def storage_env(self) -> dict[str, str]:
        """The Cloud Storage emulator and the files bucket on it (empty without one)."""
        if self.storage_port is None or not self.files_bucket:
            return {}
        return {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{self.storage_port}",
                "ACKLOOP_FILES_BUCKET": self.files_bucket}

    def save(self) -> None:
        path = Path(self.directory) / STATE_FILE
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, directory: Path) -> StackState | None:
        path = directory / STATE_FILE
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))
