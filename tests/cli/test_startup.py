"""A process that cannot start exits at once with one line naming the cause (``ackloop run``,
real subprocesses): no server that answers 500 to every health probe, no traceback per probe."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ackloop_dev.devstack.emulators import free_port

ROOT = Path(__file__).resolve().parents[2]


def _ackloop_run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ackloop", path=str(Path(sys.executable).parent))
    assert exe, "the ackloop console script is installed next to this interpreter"
    full = {
        **os.environ,
        # The clients are created, never used: no emulator needs to be up.
        "PUBSUB_EMULATOR_HOST": "127.0.0.1:1", "FIRESTORE_EMULATOR_HOST": "127.0.0.1:1",
        "ACKLOOP_HOST": "127.0.0.1", "PORT": str(free_port()),
        **env,
    }
    # The bound only keeps a regression from hanging the suite: a process that serves despite
    # its error never exits by itself.
    return subprocess.run([exe, "run"], env=full, cwd=ROOT, capture_output=True, text=True,
                          timeout=90)


def _one_failure_line(done: subprocess.CompletedProcess[str], *needles: str) -> dict[str, str]:
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if needles[0] in line]
    assert len(lines) == 1, output
    entry: dict[str, str] = json.loads(lines[0])
    assert entry["severity"] == "CRITICAL" and entry["logger"] == "ackloop.hosting.startup", entry
    for needle in needles:
        assert needle in entry["message"], entry
    return entry


@pytest.mark.parametrize("target", ["model_step", "api"])
def test_an_agent_catalog_that_cannot_be_imported_stops_the_process(target: str) -> None:
    done = _ackloop_run({"FUNCTION_TARGET": target,
                         "ACKLOOP_AGENTS": "no_such_pkg.agents:catalog"})
    entry = _one_failure_line(done, "no_such_pkg", "ModuleNotFoundError")
    assert entry["message"].startswith("start-up failed: "), entry


def test_an_invalid_setting_stops_the_process_naming_the_variable() -> None:
    done = _ackloop_run({"FUNCTION_TARGET": "tool_step", "ACKLOOP_MODEL_PROVIDER": "bogus"})
    _one_failure_line(done, "ACKLOOP_MODEL_PROVIDER", "ValidationError")


def test_an_incomplete_api_configuration_stops_the_api() -> None:
    done = _ackloop_run({"FUNCTION_TARGET": "api", "ACKLOOP_API_AUTH": "google_id_token"})
    _one_failure_line(done, "ACKLOOP_API_ID_TOKEN_AUDIENCE", "ValueError")


# The tool step never calls the model and builds its client on first use only, yet a
# misconfigured model still stops it at start-up (ackloop.hosting.runtime.check_model).
@pytest.mark.parametrize("target", ["model_step", "tool_step"])
def test_a_gemini_provider_without_credentials_stops_the_process(target: str) -> None:
    env = {"FUNCTION_TARGET": target, "ACKLOOP_MODEL_PROVIDER": "gemini",
           "ACKLOOP_GEMINI_API_KEY": "", "GOOGLE_API_KEY": "", "GEMINI_API_KEY": ""}
    done = _ackloop_run(env)
    _one_failure_line(done, "start-up failed", "api_key")


def test_an_unknown_metrics_exporter_stops_the_process_in_one_structured_line() -> None:
    done = _ackloop_run({"FUNCTION_TARGET": "model_step", "ACKLOOP_METRICS_EXPORT": "statsd"})
    entry: dict[str, object] = dict(_one_failure_line(done, "ACKLOOP_METRICS_EXPORT",
                                                      "MetricsConfigError"))
    # Cloud Logging's keys: where it was logged, when (no trace: no request was served).
    assert entry["logging.googleapis.com/sourceLocation"], entry
    assert str(entry["time"]).endswith("Z") and "logging.googleapis.com/trace" not in entry


@pytest.mark.parametrize(("source", "needles"), [
    ("import no_such_module\n", ("no_such_module", "ModuleNotFoundError")),
    ("async def another_name(request):\n    pass\n", ("FunctionNotFound", "'tool_step'")),
])
def test_a_function_module_that_cannot_serve_stops_the_process(
        source: str, needles: tuple[str, ...], tmp_path: Path) -> None:
    (tmp_path / "tool_step").mkdir()
    (tmp_path / "tool_step" / "main.py").write_text(source)
    done = _ackloop_run({"FUNCTION_TARGET": "tool_step", "ACKLOOP_FUNCTIONS_DIR": str(tmp_path)})
    _one_failure_line(done, "start-up failed", *needles)
