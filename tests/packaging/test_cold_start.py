"""``ackloop run`` (the container's entrypoint) imports only what its function needs to serve:
not the development tools, their dependencies, the CLI's other commands, nor what only another
service uses (google-genai outside the model step, FastAPI outside the API). Checked on a real
``ackloop run`` process that has served a request, with Gemini configured. functions-framework,
which it never imports, still serves a function's module."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from ackloop_dev.devstack.emulators import free_port

ROOT = Path(__file__).resolve().parents[2]
# What the serving process must never import: every one is cold-start time it does not need.
NOT_NEEDED = ("ackloop_dev", "temporalio", "matplotlib", "ackloop.cli.runs", "ackloop.cli.ask",
              "ackloop.cli.target", "ackloop.cli.metrics", "ackloop.testing.localstack",
              # the command line: the container's `ackloop run` starts without it
              "typer", "ackloop.cli.main",
              # metrics are off (no exporter configured): the OpenTelemetry SDK stays unloaded
              "opentelemetry.sdk", "opentelemetry.metrics", "opentelemetry.exporter",
              "ackloop.telemetry.metrics_file",
              # functions-framework's package imports Flask for its WSGI side;
              # ackloop.hosting.function_app
              # serves the function instead
              "functions_framework", "flask", "werkzeug",
              # what httpx's command line imports (ackloop run imports httpx without it; the
              # refused import of httpx._main itself is listed by -X importtime)
              "rich", "pygments",
              # the development catalog (demo and benchmark agents), never in the runtime
              "ackloop_dev.agents.approval_demo", "ackloop_dev.agents.research_team",
              # the API's framework, MCP tools (no catalog here uses them), the ID token signature
              # check (push auth is "none" here; deployed, "cloud_run_iam": no signature to check)
              "fastapi", "mcp", "google.oauth2.id_token",
              # the JSON Schema checks of structured output (on the first run that asks for
              # it), cron expressions (schedules only), trio (ackloop.hosting.asyncio_only: its
              # refused import is listed as "trio", what it would load is not) and attrs, which
              # only those three import
              "jsonschema", "referencing", "croniter", "trio._core", "attr", "attrs")
# What only the model step uses: the Gemini SDK (0.3 s of CPU) and its engine modules.
MODEL_STEP_ONLY = ("google.genai", "ackloop.engine.model_step", "ackloop.engine.model_call",
                   "ackloop.engine.model_inputs")
# What only the tool step uses: the pool of the HTTP client its tools call through (every other
# service builds it on the client's first request), and no function serves websockets.
TOOL_STEP_ONLY = ("httpcore",)
NO_FUNCTION = ("uvicorn.protocols.websockets",)

# The CLI's entry point (the ackloop console script); -X importtime lists on stderr every module
# the process imports.
RUN = ["-X", "importtime", "-c", "from ackloop.cli.entry import main; main()", "run"]


def _modules_after_serving(target: str, tmp_path: Path) -> list[str]:
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ACKLOOP_METRICS",
                                                                        "ACKLOOP_TRACE"))},
           "FUNCTION_TARGET": target, "PORT": str(port),
           "ACKLOOP_HOST": "127.0.0.1",
           # Gemini configured (never called): only the model step may import its SDK.
           "ACKLOOP_MODEL_PROVIDER": "gemini", "ACKLOOP_GEMINI_API_KEY": "unused-key",
           # The clients are created, never used: no emulator needs to be up.
           "PUBSUB_EMULATOR_HOST": "127.0.0.1:1", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"}
    log = tmp_path / "stderr.log"
    response = _first_answer([sys.executable, *RUN], env, port, log)
    assert response.status_code == 400, response.text
    # "import time: self [us] | cumulative | imported package", one line per module.
    return [line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines()
            if line.startswith("import time:") and "imported package" not in line]


def _first_answer(command: list[str], env: dict[str, str], port: int,
                  log: Path) -> httpx.Response:
    """Start ``command`` (its stderr to ``log``), POST ``{}`` to its port once it serves: not a
    push envelope, answered at the edge after the function module loaded; stop it."""
    # A file, not a pipe: nobody reads the pipe while the process serves, and it fills.
    with log.open("w") as stderr:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                   stderr=stderr)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.post(f"http://127.0.0.1:{port}/", json={}, timeout=5)
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"{command[0]} did not serve in 90 s"
                time.sleep(0.05)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def _among(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in names)]


@pytest.mark.parametrize("target", ["ingest", "model_step", "tool_step", "dead_letter"])
def test_ackloop_run_imports_only_what_its_function_uses(target: str, tmp_path: Path) -> None:
    modules = _modules_after_serving(target, tmp_path)
    assert "ackloop.http_push" in modules, "the function was served"
    assert _among(modules, NOT_NEEDED) == []
    model_only = _among(modules, MODEL_STEP_ONLY)
    if target == "model_step":  # it builds its Gemini client before serving
        assert {"google.genai", "ackloop.engine.model_step"} <= set(model_only)
    else:
        assert model_only == []
    tool_only = _among(modules, TOOL_STEP_ONLY)
    if target == "tool_step":
        assert "httpcore" in tool_only
    else:
        assert tool_only == []
    assert _among(modules, NO_FUNCTION) == []


def test_functions_framework_still_serves_a_step_function(tmp_path: Path) -> None:
    # A dependency of the package though ackloop run never imports it: it serves a function's
    # module as it is (--asgi: the functions are async).
    exe = shutil.which("functions-framework", path=str(Path(sys.executable).parent))
    assert exe, "functions-framework is installed with ackloop"
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ACKLOOP_METRICS",
                                                                        "ACKLOOP_TRACE"))},
           "ACKLOOP_PROJECT_ID": "p", "ACKLOOP_MODEL_PROVIDER": "scripted",
           "PUBSUB_EMULATOR_HOST": "127.0.0.1:1", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"}
    command = [exe, "--asgi", "--target=ingest", "--source=functions/ingest/main.py",
               "--host=127.0.0.1", f"--port={port}"]
    response = _first_answer(command, env, port, tmp_path / "stderr.log")
    assert response.status_code == 400, response.text
    assert "not a Pub/Sub push envelope" in response.text


@pytest.mark.parametrize("target", ["steps", "all"])
def test_one_service_serves_each_step_kind_under_its_path(target: str, tmp_path: Path) -> None:
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith(("ACKLOOP_METRICS",
                                                                        "ACKLOOP_TRACE"))},
           "FUNCTION_TARGET": target, "PORT": str(port), "ACKLOOP_HOST": "127.0.0.1",
           "ACKLOOP_PROJECT_ID": "p", "ACKLOOP_MODEL_PROVIDER": "gemini",
           "ACKLOOP_GEMINI_API_KEY": "unused-key",
           "PUBSUB_EMULATOR_HOST": "127.0.0.1:1", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1"}
    log = tmp_path / "stderr.log"
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, *RUN], cwd=ROOT, env=env,
                                   stdout=subprocess.DEVNULL, stderr=stderr)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                root = httpx.get(f"{base}/", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"{target} did not serve in 90 s"
                time.sleep(0.05)
        for kind in ("ingest", "model_step", "tool_step", "dead_letter"):
            answer = httpx.post(f"{base}/{kind}", json={}, timeout=5)
            assert answer.status_code == 400, (kind, answer.text)
            assert "not a Pub/Sub push envelope" in answer.text
            counters = httpx.get(f"{base}/{kind}", timeout=5).json()
            assert counters["status"] == "ok"
        if target == "all":  # the API everywhere else
            assert httpx.get(f"{base}/healthz", timeout=5).status_code == 200
            assert httpx.get(f"{base}/agents", timeout=5).status_code == 200
        else:
            assert root.json() == {"status": "ok", "serves": [
                "/ingest", "/model_step", "/tool_step", "/dead_letter"]}
            assert httpx.get(f"{base}/healthz", timeout=5).status_code == 404
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    modules = [line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines()
               if line.startswith("import time:") and "imported package" not in line]
    # The model client is built before serving, the tool pool too: every kind is served here.
    assert {"google.genai", "httpcore"} <= set(modules)
    # With the API, what the API imports (FastAPI, its metrics); never the development tools.
    unwanted = ("ackloop_dev", "temporalio", "matplotlib", "typer") if target == "all" \
        else NOT_NEEDED
    assert _among(modules, unwanted) == []
