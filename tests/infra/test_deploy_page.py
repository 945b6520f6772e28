"""docs/deploy.md's own-catalog and teardown sections say what infra/ does: the variable that
names the catalog is the one Terraform passes as ACKLOOP_AGENTS, the services it rolls an image
out to are the ones infra/run.tf declares, and what a destroy leaves follows from the
protection the variables and resources declare."""

from __future__ import annotations

import re

from tests.infra.terraform import TerraformConfig
from tests.infra.tools import REPO

DEPLOY = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")


def section(title: str) -> str:
    match = re.search(rf"^#+ {re.escape(title)}\n(.*?)(?=^## )", DEPLOY, re.M | re.S)
    assert match, f"docs/deploy.md has no section {title!r}"
    return match.group(1)


def test_your_own_agents_are_named_by_the_variable_terraform_passes_as_ackloop_agents(
        terraform: TerraformConfig) -> None:
    own = section("Your own agents")
    assert "agents" in terraform.variables
    assert 'ACKLOOP_AGENTS                = var.agents' in (REPO / "infra" / "run.tf").read_text()
    assert '`agents = "myapp.agents:catalog"`' in own and "--build-arg ACKLOOP_IMAGE=" in own
    roll_out = re.search(r"for service in ([a-z -]+); do", DEPLOY)
    assert roll_out, "no roll-out of your own image"
    build = (REPO / "cloudbuild.yaml").read_text(encoding="utf-8")
    services = re.search(r"_SERVICES: ([a-z -]+)\n", build)
    assert services and roll_out.group(1).split() == services.group(1).split()


def test_the_teardown_lifts_the_protection_infra_declares(terraform: TerraformConfig) -> None:
    teardown = section("9. Tear it down")
    assert terraform.variable_default("deletion_protection") is True
    assert "terraform destroy -var deletion_protection=false" in teardown
    database = terraform.resource("google_firestore_database", "main")
    assert "ABANDON" in str(database["deletion_policy"]) and "ABANDON" in teardown
    for name in ("files", "build_source"):
        bucket = terraform.resource("google_storage_bucket", name)
        assert bucket["force_destroy"] == "${!var.deletion_protection}", name
    for api in terraform.resources_of("google_project_service").values():
        assert api["disable_on_destroy"] is False
    assert "disable_on_destroy = false" in teardown
    assert "manage_firestore_database" in terraform.variables
    assert "manage_firestore_database = false" in teardown
