"""Values infra/ must refuse, checked by Terraform itself: each variable's block is planned alone
(no providers, so it runs offline) with the value, and its validation must reject it."""

from __future__ import annotations

import pytest

from tests.infra.tools import require_executable, terraform_accepts

CASES: list[tuple[str, str, bool]] = [
    # The API is never public.
    ("api_invoker_members", '["allUsers"]', False),
    ("api_invoker_members", '["user:you@example.com", "allAuthenticatedUsers"]', False),
    ("api_invoker_members", '[" AllUsers "]', False),
    ("api_invoker_members", '["user:you@example.com", "group:team@example.com"]', True),
    ("api_invoker_members", "[]", True),
    # Behind Cloud Run IAM no signature is left to verify: "oidc" would refuse every push.
    ("push_auth", '{ mode = "oidc" }', False),
    ("push_auth", "{}", True),
    ("push_auth", '{ mode = "none" }', True),
    # Warm instances per service: whole, not negative, within max_instances; under the default
    # layout ("steps") one service serves every step kind, warmed as a whole.
    ("min_instances", "{}", True),
    ("min_instances", "{ steps = 1, api = 1 }", True),
    ("min_instances", "{ api = -1 }", False),
    ("min_instances", "{ api = 0.5 }", False),
    ("min_instances", "{ steps = 21 }", False),  # above its max_instances of 20
    ("min_instances", "{ model_step = 1 }", False),  # model_step has no service of its own
    # The layouts Terraform offers: the api stays a service of its own ("all" is not offered).
    ("service_layout", '"per_step"', True),
    ("service_layout", '"steps"', True),
    ("service_layout", '"all"', False),
    ("service_layout", '"step"', False),
    # Retention: whole days, 0 (keep everything) or more.
    ("retention_days", "30", True),
    ("retention_days", "0", True),
    ("retention_days", "-1", False),
    ("retention_days", "1.5", False),
]
# Variables a validation refers to besides its own.
ALSO = {"min_instances": ("max_instances", "service_layout")}

# Under service_layout = "per_step": a service per step kind, each warmed on its own.
PER_STEP_CASES: list[tuple[str, str, bool]] = [
    ("min_instances", "{ model_step = 1, tool_step = 1, api = 1 }", True),
    ("min_instances", "{}", True),
    ("min_instances", "{ ingest = 0.5 }", False),
    ("min_instances", "{ dead_letter = 3 }", False),  # above its max_instances of 2
    ("min_instances", "{ steps = 1 }", False),  # no steps service under "per_step"
]


@pytest.mark.parametrize(("variable", "value", "accepted"), CASES)
def test_terraform_refuses_what_cannot_work(variable: str, value: str, accepted: bool) -> None:
    terraform_bin = require_executable("terraform", "TERRAFORM_BIN")
    ok, output = terraform_accepts(terraform_bin, variable, value, ALSO.get(variable, ()))
    assert ok == accepted, f"{variable} = {value}: {'accepted' if ok else output}"
    if not accepted:
        assert "Invalid value for variable" in output, output


@pytest.mark.parametrize(("variable", "value", "accepted"), PER_STEP_CASES)
def test_terraform_refuses_what_the_per_step_layout_cannot_use(
    variable: str, value: str, accepted: bool
) -> None:
    terraform_bin = require_executable("terraform", "TERRAFORM_BIN")
    ok, output = terraform_accepts(terraform_bin, variable, value, ALSO.get(variable, ()),
                                   {"service_layout": '"per_step"'})
    assert ok == accepted, f"{variable} = {value} under per_step: {'accepted' if ok else output}"
    if not accepted:
        assert "Invalid value for variable" in output, output
