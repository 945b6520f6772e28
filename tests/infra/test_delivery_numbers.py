"""One source of delivery numbers: Terraform and the local stack read shared/ackloop/delivery.json.

The retry policy, the dead-letter policy's attempts and the services' request timeouts (for push
services also the ack deadlines) are declared once. These tests fail if either side grows a copy
of its own.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from ackloop.bus.delivery import PUSH_SERVICES, load_policy
from ackloop.config.settings import Settings
from ackloop_dev.devstack.stack import StackOptions
from ackloop_dev.devstack.topology import routes
from tests.infra.terraform import TerraformConfig, delivery_numbers, expression
from tests.infra.tools import INFRA

FILE_REFERENCE = 'jsondecode(file("${path.module}/../shared/ackloop/delivery.json"))'
OVERRIDES = ("max_delivery_attempts", "retry_backoff_seconds", "request_timeout_seconds")


def test_terraform_reads_the_package_file(terraform: TerraformConfig) -> None:
    assert expression(terraform.locals["delivery"]) == FILE_REFERENCE
    read_by_terraform = (INFRA / "../shared/ackloop/delivery.json").resolve()
    read_by_the_package = Path(str(resources.files("ackloop").joinpath("delivery.json")))
    assert read_by_terraform == read_by_the_package.resolve()


def test_deployed_values_are_the_file_unless_a_variable_overrides_them(
    terraform: TerraformConfig,
) -> None:
    assert expression(terraform.locals["max_delivery_attempts"]) == (
        "coalesce(var.max_delivery_attempts, local.delivery.max_delivery_attempts)")
    backoff = terraform.locals["retry_backoff_seconds"]
    for bound in ("minimum", "maximum"):
        assert expression(backoff[bound]) == (
            f"coalesce(var.retry_backoff_seconds.{bound}, "
            f"local.delivery.retry_policy.{bound}_backoff_seconds)")
    timeouts = expression(terraform.locals["kind_request_timeout_seconds"])
    assert "local.delivery.request_timeout_seconds" in timeouts
    assert "coalesce(var.request_timeout_seconds[name], seconds)" in timeouts
    # By service: the kinds', and the steps service's, the longest of the step kinds'
    # (evaluated in test_service_layout.py).
    assert expression(terraform.locals["request_timeout_seconds"]).startswith(
        "merge(local.kind_request_timeout_seconds, {steps = max(")
    # The variables only override: unset, they hold nothing of their own.
    assert terraform.variable_default("max_delivery_attempts") is None
    for name in ("retry_backoff_seconds", "request_timeout_seconds"):
        assert terraform.variable_default(name) == {}
        assert set(terraform.object_optional_defaults(name).values()) == {None}, name


def test_resources_use_only_the_deployed_values() -> None:
    """Outside variables.tf nothing reads an override variable directly (it may be null)."""
    for path in INFRA.glob("*.tf"):
        if path.name == "variables.tf":
            continue
        text = path.read_text(encoding="utf-8")
        uses = re.findall(r"var\.(\w+)", text)
        direct = [u for u in uses if u in OVERRIDES]
        # pubsub.tf's locals are the one place that merges the overrides with the file.
        allowed = {"pubsub.tf": {"max_delivery_attempts": 1, "retry_backoff_seconds": 2,
                                 "request_timeout_seconds": 1}}.get(path.name, {})
        assert {u: direct.count(u) for u in set(direct)} == allowed, path.name


def test_the_validations_check_the_deployed_values(terraform: TerraformConfig) -> None:
    for name in OVERRIDES:
        conditions = " ".join(str(v["condition"]) for v in terraform.variables[name]["validation"])
        assert "local.delivery." in conditions, f"{name}: validated without the file's value"


def test_the_local_stack_takes_the_same_numbers(tmp_path: Path) -> None:
    numbers = delivery_numbers()
    policy = load_policy()
    assert policy.minimum_backoff_s == numbers["retry_policy"]["minimum_backoff_seconds"]
    assert policy.maximum_backoff_s == numbers["retry_policy"]["maximum_backoff_seconds"]
    assert policy.max_delivery_attempts == numbers["max_delivery_attempts"]
    assert dict(policy.request_timeout_s) == numbers["request_timeout_seconds"]
    # The topology gives each subscription its service's request timeout as ack deadline, and
    # a stack dead-letters after the policy's attempts unless a test says otherwise.
    endpoints = {name: f"http://127.0.0.1/{name}" for name in PUSH_SERVICES}
    planned = routes(Settings(project_id="p"), endpoints)
    by_endpoint = {r.endpoint.rsplit("/", 1)[1]: r.ack_deadline_s for r in planned}
    assert by_endpoint == {s: numbers["request_timeout_seconds"][s] for s in PUSH_SERVICES}
    assert StackOptions(directory=tmp_path).max_delivery_attempts == policy.max_delivery_attempts
    assert StackOptions(directory=tmp_path).push == "twin", "production-like delivery by default"
