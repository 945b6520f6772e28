"""The example user project on the local stack, offline: ``ackloop dev up`` run from its
directory with ``ACKLOOP_AGENTS`` set serves its agents, and ``ackloop ask`` gets the answer its
own script gives from its own tools, through the functions as real processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ackloop_dev.devstack.emulators import free_port

pytestmark = [pytest.mark.emulator, pytest.mark.slow]

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "support_desk"
ACKLOOP = shutil.which("ackloop", path=str(Path(sys.executable).parent)) or "ackloop"
# A user's shell offline: no ackloop settings, no emulator hosts, no Gemini credentials.
_DROPPED = ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST", "GOOGLE_API_KEY",
            "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI", "PYTHONPATH")


def _ackloop(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _DROPPED and not k.startswith("ACKLOOP_")}
    env |= {"ACKLOOP_AGENTS": "support_desk.agents:catalog", "COLUMNS": "200"}
    return subprocess.run([ACKLOOP, *args], cwd=PROJECT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("fake_gemini", [False, True], ids=["scripted", "fake-gemini"])
def test_dev_up_from_the_project_answers_with_its_script_and_tools(
        tmp_path: Path, fake_gemini: bool) -> None:
    directory = str(tmp_path / "stack")
    up = _ackloop("dev", "up", "--directory", directory, "--base-port", "0",
                  "--pubsub-port", str(free_port()), "--firestore-port", str(free_port()),
                  *(["--fake-gemini"] if fake_gemini else []))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        asked = _ackloop("ask", "--directory", directory, "--json",
                         "My order A-2001 is late, what is going on?", timeout=180)
        inspector = re.search(r"^inspector: (http://\S+/ui)$", up.stdout, re.MULTILINE)
        assert inspector, up.stdout
        page = httpx.get(inspector.group(1), timeout=10)
    finally:
        down = _ackloop("dev", "down", "--directory", directory, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    banner = "from the fake Gemini REST server" if fake_gemini else "the scripted offline model"
    assert banner in up.stdout, up.stdout
    assert page.status_code == 200 and "ackloop" in page.text, page.text[:200]
    assert asked.returncode == 0, asked.stdout + asked.stderr
    run = json.loads(asked.stdout)
    tools = [s for s in run["steps"] if s["kind"] == "tool"]
    assert [s["name"] for s in tools] == ["lookup_order", "open_ticket"]
    ticket = tools[1]["result"]["response"]["result"]["ticket"]
    assert run["answer"] == (
        "Order A-2001 is delayed (carrier Jadlog, expected 2026-12-11). "
        f"I opened ticket {ticket}; a colleague will follow up.")
