"""cloudbuild.yaml: well-formed steps, a sound dependency graph, declared substitutions, and the
same service names and repository as infra/."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra.terraform import TerraformConfig
from tests.infra.tools import REPO

# Substitutions Cloud Build provides itself.
BUILT_IN = {
    "PROJECT_ID",
    "PROJECT_NUMBER",
    "BUILD_ID",
    "LOCATION",
    "TRIGGER_NAME",
    "TRIGGER_BUILD_CONFIG_PATH",
    "COMMIT_SHA",
    "SHORT_SHA",
    "REVISION_ID",
    "BRANCH_NAME",
    "TAG_NAME",
    "REPO_NAME",
    "REPO_FULL_NAME",
    "REF_NAME",
    "SERVICE_ACCOUNT",
    "SERVICE_ACCOUNT_EMAIL",
}
# $NAME or ${NAME}; "$$" is Cloud Build's escape for a literal "$" (a shell variable).
REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@pytest.fixture(scope="module")
def build(yaml_module: Any) -> dict[str, Any]:
    with (REPO / "cloudbuild.yaml").open(encoding="utf-8") as handle:
        loaded = yaml_module.safe_load(handle)
    assert isinstance(loaded, dict)
    return loaded


def strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    return []


def references(build: dict[str, Any]) -> set[str]:
    found = set()
    for key, value in build.items():
        if key == "substitutions":
            continue
        for text in strings(value):
            for match in REFERENCE.finditer(text.replace("$$", "")):
                found.add(match.group(1) or match.group(2))
    return found


def test_every_step_is_well_formed(build: dict[str, Any]) -> None:
    steps = build["steps"]
    assert steps
    for step in steps:
        assert step.get("name"), f"step without an image: {step}"
        assert step.get("id"), f"step without an id: {step}"
        assert "args" in step or "script" in step, f"{step['id']}: needs args or script"
        assert not ("args" in step and "script" in step), f"{step['id']}: args or script, not both"


def test_step_ids_are_unique_and_wait_for_known_steps(build: dict[str, Any]) -> None:
    ids = [step["id"] for step in build["steps"]]
    assert len(ids) == len(set(ids)), f"duplicate ids: {ids}"
    seen: set[str] = set()
    for step in build["steps"]:
        for dependency in step.get("waitFor", []):
            assert dependency == "-" or dependency in seen, (
                f"{step['id']} waits for {dependency!r}, which is not an earlier step"
            )
        seen.add(step["id"])


def test_pipeline_order(build: dict[str, Any]) -> None:
    steps = {step["id"]: step for step in build["steps"]}
    for needed in ("install", "lint", "typecheck", "test", "build", "push", "deploy"):
        assert needed in steps, f"missing step {needed!r}"
    assert {"build", "lint", "typecheck", "test"} <= set(steps["push"]["waitFor"]), (
        "push only what passed every check"
    )
    assert steps["deploy"]["waitFor"] == ["push"]
    test_script = " ".join(strings(steps["test"]))
    assert "bash .ci/run" in test_script or "pytest" in test_script
    emulators = steps["emulator-jars"]["name"]
    assert emulators == "${_EMULATORS_IMAGE}"
    assert build["substitutions"]["_EMULATORS_IMAGE"] == (
        "gcr.io/google.com/cloudsdktool/google-cloud-cli:emulators"
    )
    assert "emulator-jars" in steps["test"]["waitFor"]
    install = " ".join(strings(steps["install"]))
    assert "pip install" in install and ".[dev" in install


def test_substitutions_used_are_declared_and_declared_are_used(build: dict[str, Any]) -> None:
    declared = set(build.get("substitutions", {}))
    used = references(build)
    undeclared = {name for name in used if name not in declared and name not in BUILT_IN}
    assert not undeclared, f"undeclared substitutions (escape shell variables as $$): {undeclared}"
    for name in declared:
        assert name.startswith("_"), f"user substitutions start with '_': {name}"
    assert declared <= used, f"declared but unused: {declared - used}"
    for name in ("_REGION", "_REPOSITORY", "_IMAGE"):
        assert name in declared


def test_images_are_built_by_a_step(build: dict[str, Any]) -> None:
    images = build.get("images", [])
    assert images
    build_step = next(step for step in build["steps"] if step["id"] == "build")
    tags = [arg.split("=", 1)[1] for arg in build_step["args"] if arg.startswith("--tag=")]
    for image in images:
        assert image in tags, f"{image} is not tagged by the build step ({tags})"
        assert image.startswith("${_REGION}-docker.pkg.dev/$PROJECT_ID/${_REPOSITORY}/")


def test_deploys_the_services_terraform_declares(
    build: dict[str, Any], terraform: TerraformConfig
) -> None:
    # The default layout's services ("steps"; "per_step" passes the build_services output).
    assert terraform.variable_default("service_layout") == "steps"
    substitutions = build["substitutions"]
    declared = {"ackloop-steps", "ackloop-api"}
    deployed = {
        f"{substitutions['_SERVICE_PREFIX']}-{s}" for s in substitutions["_SERVICES"].split()
    }
    assert deployed == declared
    service = terraform.resource("google_cloud_run_v2_service", "service")
    assert service["name"] == 'ackloop-${replace(each.key, "_", "-")}'
    assert substitutions["_REPOSITORY"] == terraform.variable_default("artifact_repository")
    assert substitutions["_REGION"] == terraform.variable_default("region")
    deploy = " ".join(strings(next(s for s in build["steps"] if s["id"] == "deploy")))
    assert "--image" in deploy and "image.digest" in deploy, "roll out by digest"


def test_custom_service_account_builds_log_to_cloud_logging(build: dict[str, Any]) -> None:
    assert build["options"]["logging"] == "CLOUD_LOGGING_ONLY"


# Executables the repository's CI script may call that python:*-slim images do not have, with the
# Debian package that provides each.
NOT_IN_SLIM_PYTHON = {"make": "make", "java": "openjdk-"}


def test_the_test_step_installs_what_its_script_calls(build: dict[str, Any]) -> None:
    """The test step runs .ci/run in the slim Python image: every tool that script calls and the
    image lacks (make, a JRE for the emulators) must be installed by the step first."""
    step = next(s for s in build["steps"] if s["id"] == "test")
    image = build["substitutions"][step["name"].strip("${}")]
    assert image.startswith("python:") and "slim" in image, image
    script = " ".join(strings(step))
    assert "bash .ci/run" in script
    ci_run = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    called = {tool for tool in NOT_IN_SLIM_PYTHON
              if re.search(rf"(^|[\s;&|(]){tool}(\s|$)", ci_run, re.MULTILINE)}
    assert "make" in called, ".ci/run no longer calls make: update this test"
    installs = " ".join(re.findall(r"apt-get install [^\n]*", script)).split()
    for tool in called:
        package = NOT_IN_SLIM_PYTHON[tool]
        assert any(word.startswith(package) for word in installs), (
            f"the test step runs .ci/run, which calls {tool}, in {image} without installing "
            f"{package}: apt-get install it before .ci/run")
    before = script.index("apt-get install")
    assert before < script.index("bash .ci/run")


def test_the_build_account_may_read_the_source_gcloud_stages(terraform: TerraformConfig) -> None:
    """gcloud builds submit --service-account uploads the source to a bucket and the build, as
    ackloop-build, reads it from there: the build account needs a Storage read role on exactly
    that bucket, and the documented commands must stage into it."""
    bucket = terraform.resource("google_storage_bucket", "build_source")
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["public_access_prevention"] == "enforced"
    grants = {
        name: body
        for name, body in terraform.resources_of("google_storage_bucket_iam_member").items()
        if body["member"] == "${google_service_account.build.member}"
    }
    assert grants, "the build service account has no Storage role: its builds fail with 403"
    (grant,) = grants.values()
    assert grant["bucket"] == "${google_storage_bucket.build_source.name}"
    assert grant["role"] == "roles/storage.objectViewer", "read the source, nothing more"
    for name, body in terraform.resources_of("google_project_iam_member").items():
        if body["member"] == "${google_service_account.build.member}":
            assert not str(body["role"]).startswith("roles/storage."), (
                f"{name}: a project-wide Storage role is more than the build needs")
    assert "storage.googleapis.com" in str(terraform.locals["required_apis"])
    staging = "${google_storage_bucket.build_source.name}"
    outputs = {name: body for file in terraform.files.values()
               for block_ in file.get("output", []) for name, body in block_.items()}
    assert outputs["build_source_staging_dir"]["value"] == f"gs://{staging}/source"
    deploy = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    submits = re.findall(r"^gcloud builds submit(?:[^\n]*\\\n)*[^\n]*", deploy, re.MULTILINE)
    assert submits
    for command in submits:
        assert '--gcs-source-staging-dir="$STAGING"' in command, command
    assert "terraform output -raw build_source_staging_dir" in deploy
    assert "google_storage_bucket_iam_member.build_reads_source" in deploy, "bootstrap target"
