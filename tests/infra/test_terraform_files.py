"""infra/ parses, is split by concern, pins its providers and documents every variable."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.infra.terraform import TerraformConfig, block
from tests.infra.tools import INFRA, loud_skip, require_executable, require_module

EXPECTED_FILES = {
    "versions.tf",
    "variables.tf",
    "apis.tf",
    "artifact_registry.tf",
    "service_accounts.tf",
    "iam.tf",
    "pubsub.tf",
    "run.tf",
    "firestore.tf",
    "secrets.tf",
    "outputs.tf",
    "layout.tf",
}


def test_infra_is_split_by_concern() -> None:
    present = {path.name for path in INFRA.glob("*.tf")}
    assert present >= EXPECTED_FILES, f"missing: {sorted(EXPECTED_FILES - present)}"
    assert (INFRA / "terraform.tfvars.example").is_file()


@pytest.mark.parametrize("path", sorted(INFRA.glob("*.tf")), ids=lambda p: p.name)
def test_every_file_parses(path: Path) -> None:
    hcl2 = require_module("hcl2")
    with path.open(encoding="utf-8") as handle:
        parsed = hcl2.load(handle)
    assert parsed, f"{path.name} parsed to nothing"


def test_tfvars_example_parses_and_names_only_declared_variables(
    terraform: TerraformConfig,
) -> None:
    hcl2 = require_module("hcl2")
    options = hcl2.SerializationOptions(with_comments=False)
    with (INFRA / "terraform.tfvars.example").open(encoding="utf-8") as handle:
        values = hcl2.load(handle, serialization_options=options)
    assert set(values) <= set(terraform.variables), set(values) - set(terraform.variables)
    required = {name for name, v in terraform.variables.items() if "default" not in v}
    assert required <= set(values), f"the example omits required {sorted(required - set(values))}"


def test_every_variable_has_a_type_and_a_description(terraform: TerraformConfig) -> None:
    assert terraform.variables
    for name, variable in terraform.variables.items():
        assert variable.get("type"), f"variable {name!r} has no type"
        assert str(variable.get("description", "")).strip(), f"variable {name!r} has no description"


def test_providers_are_pinned(terraform: TerraformConfig) -> None:
    settings = terraform.files["versions.tf"]["terraform"][0]
    assert settings.get("required_version"), "pin the Terraform version"
    providers = settings["required_providers"][0]
    for name in ("google", "google-beta"):
        assert name in providers, f"required_providers lacks {name}"
        assert providers[name]["source"] == f"hashicorp/{name}"
        assert providers[name]["version"].startswith("~>"), f"{name} must be pinned (~>)"


def test_apis_terraform_enables_cover_every_resource_family(terraform: TerraformConfig) -> None:
    apis = str(terraform.locals["required_apis"])
    for api in ("run", "pubsub", "firestore", "secretmanager", "artifactregistry", "iam"):
        assert f"{api}.googleapis.com" in apis
    assert "aiplatform.googleapis.com" in apis, "Vertex AI backend needs aiplatform"
    service = terraform.resource("google_project_service", "required")
    assert service["disable_on_destroy"] is False


def test_terraform_fmt_is_clean() -> None:
    terraform_bin = require_executable("terraform", "TERRAFORM_BIN")
    result = subprocess.run(
        [terraform_bin, "fmt", "-check", "-diff", "-recursive", str(INFRA)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"terraform fmt would change:\n{result.stdout}{result.stderr}"


def test_terraform_validate() -> None:
    """Full `terraform validate` needs the google providers, which only the Terraform registry
    serves: opt in with INFRA_TERRAFORM_VALIDATE=1 on a machine that can reach it."""
    if os.environ.get("INFRA_TERRAFORM_VALIDATE") != "1":
        loud_skip(
            "terraform validate",
            "it needs the google/google-beta providers, which only the Terraform registry serves",
            "INFRA_TERRAFORM_VALIDATE=1 with Terraform >= 1.9 and the registry reachable",
        )
    terraform_bin = require_executable("terraform", "TERRAFORM_BIN")
    with tempfile.TemporaryDirectory() as workdir:
        copy = Path(workdir) / "infra"
        shutil.copytree(INFRA, copy, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
        for command in (["init", "-backend=false", "-input=false"], ["validate", "-no-color"]):
            result = subprocess.run(
                [terraform_bin, *command],
                cwd=copy,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            assert result.returncode == 0, (
                f"terraform {command[0]}:\n{result.stdout}{result.stderr}"
            )


def test_firestore_ttl_policy_on_idempotency_expire_at(terraform: TerraformConfig) -> None:
    field = terraform.resource("google_firestore_field", "idempotency_expire_at")
    assert field["collection"] == "${var.collection_prefix}idempotency"
    assert field["field"] == "expire_at"
    assert "ttl_config" in field, "the TTL policy is the ttl_config block"


def test_firestore_composite_index_for_runs_of_a_conversation(terraform: TerraformConfig) -> None:
    index = terraform.resource("google_firestore_index", "runs_by_conversation")
    assert index["collection"] == "${var.collection_prefix}runs"
    fields = [(f["field_path"], f["order"]) for f in index["fields"]]
    assert fields == [("conversation_id", "ASCENDING"), ("created_at", "ASCENDING")]


def test_firestore_database_is_native(terraform: TerraformConfig) -> None:
    database = terraform.resource("google_firestore_database", "main")
    assert database["type"] == "FIRESTORE_NATIVE"
    assert database["name"] == "${var.firestore_database}"


def test_gemini_key_comes_from_secret_manager_only_for_api_key_backend(
    terraform: TerraformConfig,
) -> None:
    secret = terraform.resource("google_secret_manager_secret", "gemini_api_key")
    assert 'var.gemini_backend == "api_key"' in secret["count"]
    assert "auto" in block(secret, "replication")
    access = terraform.resource(
        "google_secret_manager_secret_iam_member", "model_step_reads_gemini_key"
    )
    assert access["role"] == "roles/secretmanager.secretAccessor"
    # The account of the service that runs model_step (test_service_layout.py evaluates it).
    model_step_account = '${google_service_account.service[local.service_of["model_step"]].member}'
    assert access["member"] == model_step_account
    vertex = terraform.resource("google_project_iam_member", "model_step_vertex_user")
    assert vertex["role"] == "roles/aiplatform.user"
    assert vertex["member"] == model_step_account
    assert 'var.gemini_backend == "vertex"' in vertex["count"]
