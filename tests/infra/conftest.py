from __future__ import annotations

from typing import Any

import pytest

from tests.infra.evaluate import Evaluator
from tests.infra.terraform import TerraformConfig, load_terraform
from tests.infra.tools import INFRA, LOUD_SKIPS, require_executable, require_module


@pytest.fixture(scope="session")
def terraform() -> TerraformConfig:
    hcl2 = require_module("hcl2")
    return load_terraform(INFRA, hcl2)


@pytest.fixture(scope="session")
def evaluator(terraform: TerraformConfig) -> Evaluator:
    """infra/'s expressions, evaluated by Terraform offline (tests.infra.evaluate)."""
    return Evaluator(require_executable("terraform", "TERRAFORM_BIN"), terraform, INFRA)


@pytest.fixture(scope="session")
def yaml_module() -> Any:
    return require_module("yaml")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not LOUD_SKIPS:
        return
    terminalreporter.section("INFRA CHECKS SKIPPED", sep="!", red=True, bold=True)
    for reason in dict.fromkeys(LOUD_SKIPS):
        terminalreporter.write_line(reason, red=True, bold=True)
