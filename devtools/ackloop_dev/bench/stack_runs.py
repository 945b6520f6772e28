"""What the fan-in and fan-out benchmarks share: a local stack on free ports, and runs asked
through ``POST /runs`` and followed to their end."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from ackloop_dev.devstack import emulators, ports
from ackloop_dev.devstack.stack import LocalStack, StackOptions

TERMINAL = {"completed", "failed", "cancelled"}


def free_stack(directory: Path, project_id: str, agents: str, *,
               fake_gemini: bool = False, extra_env: dict[str, str] | None = None
               ) -> LocalStack:
    """A stack (not started) whose emulators and services all have free ports, its services
    given ``extra_env`` besides their own."""
    for _ in range(20):
        stack = LocalStack(StackOptions(
            directory=directory, project_id=project_id,
            pubsub_port=emulators.free_port(), firestore_port=emulators.free_port(),
            base_port=random.randrange(21000, 29000, 20), fake_gemini=fake_gemini,
            sandbox_apis=False, agents=agents, extra_env=dict(extra_env or {})))
        if not ports.taken(stack.planned_ports()):
            return stack
    raise RuntimeError("no free block of ports for the stack")


def ask_and_follow(api: str, agent: str, text: str, deadline: float,
                   poll_s: float = 0.1) -> dict[str, Any]:
    """Create a run of ``agent`` and return its view (``GET /runs/{id}``) once it has ended."""
    with httpx.Client(base_url=api, timeout=30.0) as http:
        created = http.post("/runs", json={"text": text, "agent": agent})
        created.raise_for_status()
        run_id = created.json()["run_id"]
        while time.monotonic() < deadline:
            view: dict[str, Any] = http.get(f"/runs/{run_id}").json()
            if view.get("status") in TERMINAL:
                return view
            time.sleep(poll_s)
    raise TimeoutError(f"run {run_id} did not end in time")


def asked_at_once(api: str, asks: list[tuple[str, str]], timeout_s: float = 600.0
                  ) -> tuple[float, list[dict[str, Any]]]:
    """``(agent, text)`` runs asked at once: seconds until the last ended, and their views."""
    started = time.monotonic()
    deadline = started + timeout_s
    with ThreadPoolExecutor(max_workers=max(1, len(asks))) as pool:
        views = list(pool.map(lambda a: ask_and_follow(api, a[0], a[1], deadline), asks))
    return time.monotonic() - started, views
