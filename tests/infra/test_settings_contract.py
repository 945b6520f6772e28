"""The environment contract between shared/ackloop/config/settings.py and infra/run.tf, both ways.

Every name Terraform sets on a service is a setting (or the launcher's FUNCTION_TARGET); every
setting is set by Terraform under exactly one of its names; Terraform's defaults are the code's.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import AliasChoices

from ackloop.bus.delivery import load_policy
from ackloop.cli.serving import FUNCTION_TARGETS as SERVED_TARGETS
from ackloop.config.settings import Settings
from tests.infra.terraform import TerraformConfig, block, dynamic_blocks, expression

# Read by `ackloop run`, not by Settings: picks what the image serves.
LAUNCHER_ENV = {"FUNCTION_TARGET"}

# The targets of the "per_step" layout; "steps" (the default) deploys steps and api
# (test_service_layout.py). `ackloop run` also serves "all", which Terraform never deploys: the
# api keeps a service of its own.
FUNCTION_TARGETS = {"ingest", "model_step", "tool_step", "dead_letter", "api"}

# Settings whose deployed default differs from the code's on purpose, with the reason.
DELIBERATE_DIFFERENCES = {
    "model_provider": "deployed services use Gemini or fail loudly, never the scripted fallback",
    "project_id": "no default: the project is always given",
    "push_auth": "deployed step services sit behind Cloud Run IAM and check the claims it "
    "forwards (cloud_run_iam); locally nothing sends a push token",
    "api_auth": "the deployed API names each invoker by the token Cloud Run IAM checked "
    "(cloud_run_iam); locally nothing sends one, and 'none' says so with a warning",
}

# Settings whose Terraform value is derived rather than a plain variable; checked one by one below.
DERIVED = {"use_vertexai", "firestore_database", "gemini_api_key", "request_timeout_seconds",
           "push_auth_audience", "push_auth_email", "api_sweeper_email",
           "service_vcpu", "service_memory_gib", "trace_dir", "files_bucket", "wake_queue",
           "wake_identity", "tasks_emulator_host", "model_quotas", "concurrency_limits",
           "spend_limits"} | {
    name for name in Settings.model_fields if name.endswith("_topic")
}


def settings_env_names() -> dict[str, set[str]]:
    """Setting -> the environment names pydantic-settings reads it from (upper-cased)."""
    prefix = str(Settings.model_config.get("env_prefix", ""))
    names: dict[str, set[str]] = {}
    for name, info in Settings.model_fields.items():
        alias = info.validation_alias
        if alias is None:
            names[name] = {f"{prefix}{name}".upper()}
        elif isinstance(alias, AliasChoices):
            names[name] = {c.upper() for c in alias.choices if isinstance(c, str)}
        else:
            names[name] = {str(alias).upper()}
    return names


def terraform_env(terraform: TerraformConfig) -> dict[str, Any]:
    """Every env name run.tf sets on a service container -> its value expression."""
    env: dict[str, Any] = {}
    for local_name in ("service_env", "optional_service_env"):
        assert terraform.locals_file[local_name] == "run.tf"
        env.update(terraform.locals[local_name])
    service = terraform.resource("google_cloud_run_v2_service", "service")
    container = block(block(service, "template"), "containers")
    for static in container.get("env", []):
        env[static["name"]] = static.get("value", static.get("value_source"))
    for dynamic in dynamic_blocks(container, "env"):
        content = dynamic["content"][0]
        if not str(content["name"]).startswith("${"):
            env[content["name"]] = content.get("value_source")
    return env


def setting_for(env_name: str) -> str | None:
    for setting, names in settings_env_names().items():
        if env_name.upper() in names:
            return setting
    return None


def test_every_env_name_terraform_sets_is_read_by_the_services(
    terraform: TerraformConfig,
) -> None:
    unknown = {
        name
        for name in terraform_env(terraform)
        if name not in LAUNCHER_ENV and setting_for(name) is None
    }
    assert not unknown, f"run.tf sets names no setting reads: {sorted(unknown)}"


def test_every_setting_is_set_by_terraform_exactly_once(terraform: TerraformConfig) -> None:
    covered: dict[str, list[str]] = {}
    for name in terraform_env(terraform):
        setting = setting_for(name)
        if setting is not None:
            covered.setdefault(setting, []).append(name)
    missing = set(Settings.model_fields) - set(covered)
    assert not missing, f"settings Terraform never sets: {sorted(missing)}"
    twice = {s: names for s, names in covered.items() if len(names) > 1}
    assert not twice, f"settings set under two names (which wins is an accident): {twice}"


def test_the_env_maps_reach_every_container(terraform: TerraformConfig) -> None:
    env_merge = expression(terraform.locals["env"])
    assert "local.service_env" in env_merge and "local.optional_service_env" in env_merge
    assert "if value != null" in env_merge, "unset optional settings must not become empty strings"
    service = terraform.resource("google_cloud_run_v2_service", "service")
    container = block(block(service, "template"), "containers")
    for_eaches = [d["for_each"] for d in dynamic_blocks(container, "env")]
    assert "${local.env}" in for_eaches


def test_function_target_selects_the_entry_point(terraform: TerraformConfig) -> None:
    assert set(terraform.locals["per_step_services"]) == FUNCTION_TARGETS
    assert FUNCTION_TARGETS | {"steps"} <= set(SERVED_TARGETS)
    service = terraform.resource("google_cloud_run_v2_service", "service")
    assert service["for_each"] == "${local.services}"
    container = block(block(service, "template"), "containers")
    assert {"name": "FUNCTION_TARGET", "value": "${each.key}"} in container["env"]
    assert block(container, "ports")["container_port"] == 8080


def test_gemini_api_key_comes_from_the_secret(terraform: TerraformConfig) -> None:
    env = terraform_env(terraform)
    key_names = settings_env_names()["gemini_api_key"]
    set_as = [name for name in env if name in key_names]
    assert set_as == ["GOOGLE_API_KEY"]
    ref = env["GOOGLE_API_KEY"][0]["secret_key_ref"][0]
    assert ref["version"] == "latest"
    assert 'toset([local.service_of["model_step"]])' in expression(
        terraform.locals["gemini_key_services"])


@pytest.mark.parametrize(
    "setting",
    sorted(set(Settings.model_fields) - set(DELIBERATE_DIFFERENCES) - DERIVED),
)
def test_terraform_default_is_the_code_default(terraform: TerraformConfig, setting: str) -> None:
    env = terraform_env(terraform)
    (name,) = [n for n in env if setting_for(n) == setting]
    deployed = terraform.default_of_reference(expression(env[name]))
    code = Settings.model_fields[setting].default
    assert deployed == code, f"{name}: Terraform default {deployed!r} != settings default {code!r}"


def test_derived_settings_keep_the_code_defaults(terraform: TerraformConfig) -> None:
    env = terraform_env(terraform)
    fields = Settings.model_fields
    # use_vertexai: "true" only for the Vertex AI backend; the default backend is the API key.
    assert (
        expression(env["GOOGLE_GENAI_USE_VERTEXAI"]) == 'tostring(var.gemini_backend == "vertex")'
    )
    assert terraform.variable_default("gemini_backend") == "api_key"
    assert fields["use_vertexai"].default is False
    # Push auth and the sweeper's identity: what infra/ creates, not variables (checked in
    # test_pubsub_and_run.py and test_sweeper.py).
    assert "local.push_audience" in expression(env["ACKLOOP_PUSH_AUTH_AUDIENCE"])
    assert "google_service_account.push_invoker.email" in expression(env["ACKLOOP_PUSH_AUTH_EMAIL"])
    assert "google_service_account.sweeper" in expression(env["ACKLOOP_API_SWEEPER_EMAIL"])
    # model_quotas and concurrency_limits: the variables as JSON, none by default.
    for name in ("model_quotas", "concurrency_limits", "spend_limits"):
        assert expression(env[f"ACKLOOP_{name.upper()}"]) == f"jsonencode(var.{name})"
        assert terraform.variable_default(name) == []
        factory = fields[name].default_factory
        assert factory is not None and factory() == []  # type: ignore[call-arg]
    # firestore_database: the managed database's name, which is var.firestore_database.
    assert terraform.variable_default("firestore_database") == fields["firestore_database"].default
    assert "var.firestore_database" in expression(terraform.locals["firestore_database"])


def test_the_deployed_api_serves_no_cdn_pages_by_default(terraform: TerraformConfig) -> None:
    """S1: /docs and /redoc load their scripts from a CDN on the inspector's origin; a
    deployment turns them off unless its configuration asks for them (the code's default
    serves them, for a local stack)."""
    assert terraform.variable_default("api", "docs") is False
    assert expression(terraform_env(terraform)["ACKLOOP_API_DOCS"]) == "tostring(var.api.docs)"


def test_topic_env_names_point_at_the_topics_with_the_code_default_names(
    terraform: TerraformConfig,
) -> None:
    env = terraform_env(terraform)
    topics = terraform.locals["topics"]
    for setting, info in Settings.model_fields.items():
        if not setting.endswith("_topic"):
            continue
        role = setting.removesuffix("_topic")
        assert topics.get(role) == info.default, f"topic {role!r} must be named {info.default!r}"
        (name,) = [n for n in env if setting_for(n) == setting]
        assert env[name] == f'${{google_pubsub_topic.topic["{role}"].name}}'


def test_collections_follow_the_prefix_setting(terraform: TerraformConfig) -> None:
    pattern = Settings.model_fields["collection_prefix"].metadata
    assert any("^[a-z0-9_]*$" in str(m) for m in pattern)
    validation = terraform.variables["collection_prefix"]["validation"][0]["condition"]
    assert re.search(r"\^\[a-z0-9_\]\*\$", validation)


def test_each_service_is_told_its_own_request_timeout(terraform: TerraformConfig) -> None:
    """request_timeout_seconds bounds every wait inside a request, so each service must get the
    timeout Cloud Run really gives it (the template's), not one shared number."""
    env = terraform_env(terraform)
    (name,) = [n for n in env if setting_for(n) == "request_timeout_seconds"]
    assert env[name] == "${tostring(local.request_timeout_seconds[each.key])}"
    service = terraform.resource("google_cloud_run_v2_service", "service")
    assert block(service, "template")["timeout"] == "${local.request_timeout_seconds[each.key]}s"
    # The code's default is model_step's deployed timeout (the service that waits the longest).
    assert (Settings.model_fields["request_timeout_seconds"].default
            == load_policy().request_timeout_s["model_step"])


def test_each_service_is_told_its_own_size_for_the_cost_ledger(
    terraform: TerraformConfig,
) -> None:
    """A request's time is priced by the instance's vCPUs and memory: each service is told the
    ones its container gets, and the code's defaults are the smaller services'."""
    env = terraform_env(terraform)
    (vcpu,) = [n for n in env if setting_for(n) == "service_vcpu"]
    (memory,) = [n for n in env if setting_for(n) == "service_memory_gib"]
    service = terraform.resource("google_cloud_run_v2_service", "service")
    limits = block(block(block(service, "template"), "containers"), "resources")["limits"]
    assert env[vcpu] == limits["cpu"] == "1"
    assert env[memory] == "${tostring(each.value.memory_gib)}"
    gib = {"512Mi": 0.5, "1Gi": 1}
    for name, spec in terraform.locals["per_step_services"].items():
        assert spec["memory_gib"] == gib[spec["memory"]], name
    assert Settings.model_fields["service_vcpu"].default == 1.0
    assert Settings.model_fields["service_memory_gib"].default == 0.5


def test_a_deployment_writes_no_trace_files(terraform: TerraformConfig) -> None:
    """Its spans go to Cloud Trace: the trace files are the local stack's."""
    env = terraform_env(terraform)
    (name,) = [n for n in env if setting_for(n) == "trace_dir"]
    assert env[name] is None
    assert Settings.model_fields["trace_dir"].default is None
    assert Settings.model_fields["trace_export"].default == "auto"


def test_the_benchmark_agents_are_never_deployed(terraform: TerraformConfig) -> None:
    """They are the development catalog (ackloop_dev.agents), which no deployment names."""
    env = terraform_env(terraform)
    assert not [name for name, value in env.items() if "ackloop_dev" in str(value)]
    assert Settings.model_fields["agents"].default is None


def test_a_deployment_arms_its_wakes_on_its_cloud_tasks_queue(terraform: TerraformConfig) -> None:
    """A sleeping call's wake goes to wakes.tf's queue, published as the waker identity; the
    local stack's task queue is never named."""
    env = terraform_env(terraform)
    names = {setting_for(n): n for n in env}
    assert "google_cloud_tasks_queue.wakes.id" in str(env[names["wake_queue"]])
    assert "google_service_account.waker.email" in str(env[names["wake_identity"]])
    assert env[names["tasks_emulator_host"]] is None
    for name in ("wake_queue", "wake_identity", "tasks_emulator_host"):
        assert Settings.model_fields[name].default is None
