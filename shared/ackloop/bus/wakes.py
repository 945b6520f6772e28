"""Messages published at a time: what wakes a call that sleeps and fires a schedule.

A :class:`Wake` is one message to publish to a topic at a moment, under a name: arming the
same name again is absorbed (a retried step arms its wake again; one publish follows). The
message then goes the way of every message (push, redelivery, dead letter), and its consumer
finds whether its time has come, so a wake that comes early (a wait longer than the waker
holds: :attr:`Waker.horizon_s`), twice, or not at all (the sweeper finds what is due) loses
nothing and does nothing twice.

- :class:`CloudTasksWaker`: a Cloud Tasks task per wake, scheduled at its time, whose HTTP
  request is Pub/Sub's ``topics.publish`` with an OAuth token of the wake identity (the task's
  name is the wake's, which Cloud Tasks keeps unique). Against the local stack's task queue
  (``ACKLOOP_TASKS_EMULATOR_HOST``) the same requests go without credentials, and the publish
  to the Pub/Sub emulator's REST endpoint.
- :class:`NoWaker`: no queue configured: the sweeper wakes what is due, at its own period.
- :class:`MemoryWaker`: for tests, which move a clock to the next wake.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

log = logging.getLogger(__name__)

CLOUD_TASKS_HORIZON_S = 30 * 24 * 3600.0
"""Cloud Tasks schedules a task at most 30 days ahead; a longer wait is woken then, finds its
time not come, and is armed again."""
TASKS_API = "https://cloudtasks.googleapis.com/v2"
PUBSUB_API = "https://pubsub.googleapis.com/v1"
SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class WakeNotArmed(Exception):
    """The waker refused or could not take the wake now (the caller retries, or the sweeper
    finds what is due)."""


@dataclass(frozen=True)
class Wake:
    """``data`` (with ``attributes``) to publish to ``topic`` (its short name, as the
    publisher's) at ``at``."""

    name: str
    at: float
    topic: str
    data: bytes
    attributes: Mapping[str, str] = field(default_factory=dict)

    def task_id(self) -> str:
        """A Cloud Tasks task id for the name (letters, digits, ``-`` and ``_``, at most 500):
        a digest, so any name is one, and the same name the same id."""
        return "w" + hashlib.sha256(self.name.encode()).hexdigest()[:40]


class Waker(Protocol):
    horizon_s: float
    """How far ahead a wake can be armed at once (a later one is armed at the horizon)."""

    async def arm(self, wake: Wake) -> None:
        """Have ``wake`` published at its time, once however often it is armed. Raises
        :class:`WakeNotArmed`."""
        ...


class NoWaker:
    """No wake mechanism: what is due is found by the sweeper."""

    horizon_s = math.inf

    async def arm(self, wake: Wake) -> None:
        return None


class MemoryWaker:
    """The wakes armed, kept in memory: tests publish what is due as their clock moves."""

    def __init__(self, horizon_s: float = math.inf) -> None:
        self.horizon_s = horizon_s
        self.armed: dict[str, Wake] = {}
        self.fired: set[str] = set()
        self.arms = 0

    async def arm(self, wake: Wake) -> None:
        self.arms += 1
        if wake.name not in self.armed and wake.name not in self.fired:
            self.armed[wake.name] = wake

    def next_at(self) -> float | None:
        """When the next wake is due (None: none armed)."""
        return min((w.at for w in self.armed.values()), default=None)

    def due(self, now: float) -> list[Wake]:
        """Take the wakes due at ``now``, earliest first."""
        taken = sorted((w for w in self.armed.values() if w.at <= now), key=lambda w: w.at)
        for wake in taken:
            del self.armed[wake.name]
            self.fired.add(wake.name)
        return taken


def publish_body(wake: Wake) -> bytes:
    """The body of Pub/Sub's ``topics.publish`` for the wake's message."""
    message: dict[str, Any] = {"data": base64.b64encode(wake.data).decode()}
    if wake.attributes:
        message["attributes"] = dict(wake.attributes)
    return json.dumps({"messages": [message]}, separators=(",", ":")).encode()


def rfc3339(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class CloudTasksWaker:
    """Wakes as Cloud Tasks tasks in ``queue`` (``projects/P/locations/L/queues/Q``), each
    publishing to a topic of ``project``."""

    horizon_s = CLOUD_TASKS_HORIZON_S

    def __init__(self, queue: str, identity: str | None, project: str, *,
                 emulator_host: str | None = None, pubsub_emulator_host: str | None = None,
                 timeout_s: float = 10.0) -> None:
        self.queue = queue
        self.project = project
        self.identity = identity
        self._tasks = f"http://{emulator_host}/v2" if emulator_host else TASKS_API
        self._pubsub = (f"http://{pubsub_emulator_host}/v1" if pubsub_emulator_host
                        else PUBSUB_API)
        self._local = emulator_host is not None
        self._timeout_s = timeout_s
        self._http: httpx.AsyncClient | None = None
        self._credentials: Any = None

    def task(self, wake: Wake) -> dict[str, Any]:
        """The task that publishes ``wake`` at its time."""
        request: dict[str, Any] = {
            "url": f"{self._pubsub}/projects/{self.project}/topics/{wake.topic}:publish",
            "httpMethod": "POST",
            "headers": {"Content-Type": "application/json"},
            "body": base64.b64encode(publish_body(wake)).decode(),
        }
        if self.identity and not self._local:
            request["oauthToken"] = {"serviceAccountEmail": self.identity, "scope": SCOPE}
        return {"name": f"{self.queue}/tasks/{wake.task_id()}",
                "scheduleTime": rfc3339(wake.at), "httpRequest": request}

    async def arm(self, wake: Wake) -> None:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=self._timeout_s)
        headers = {} if self._local else {"Authorization": f"Bearer {await self._token()}"}
        try:
            answer = await self._http.post(f"{self._tasks}/{self.queue}/tasks",
                                           json={"task": self.task(wake)}, headers=headers)
        except httpx.HTTPError as exc:
            raise WakeNotArmed(f"Cloud Tasks unreachable: {exc}") from exc
        if answer.status_code == 409:
            return  # armed before under this name (ALREADY_EXISTS)
        if answer.is_error:
            raise WakeNotArmed(f"Cloud Tasks answered {answer.status_code}: "
                               f"{answer.text[:300]}")

    async def _token(self) -> str:
        """An access token of the process's credentials, refreshed when it expires."""
        import google.auth
        import google.auth.transport.requests

        if self._credentials is None:
            self._credentials, _ = google.auth.default(scopes=[SCOPE])
        credentials = self._credentials
        if not credentials.valid:
            request = google.auth.transport.requests.Request()
            await asyncio.to_thread(credentials.refresh, request)
        return str(credentials.token)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
