"""service_layout: a Cloud Run service per step kind ("per_step"), or one service serving every
step kind under /<kind> ("steps", FUNCTION_TARGET=steps).

Terraform itself evaluates what each layout deploys (tests.infra.evaluate: the locals, the
resources' for_each and attributes, resources named in them as stubs, offline), and the tests
compare the layouts: "per_step" keeps every address and value it always had, "steps" deploys
steps and api, pushes each kind to its path, and gives the steps account what the four step
kinds' accounts had, together.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from ackloop.cli.serving import FUNCTION_TARGETS as SERVED_TARGETS
from tests.infra.evaluate import Evaluator, hcl
from tests.infra.terraform import TerraformConfig, block, delivery_numbers, dynamic_blocks

STEP_KINDS = ("ingest", "model_step", "tool_step", "dead_letter")
LAYOUTS = ("per_step", "steps")
BACKENDS = ("api_key", "vertex")

# The instances of every resource keyed by service under "per_step", as before the layouts:
# their addresses must not move.
PER_STEP_ADDRESSES = {
    ("google_cloud_run_v2_service", "service"): set(STEP_KINDS) | {"api"},
    ("google_service_account", "service"): set(STEP_KINDS) | {"api"},
    ("google_project_iam_member", "firestore_user"): set(STEP_KINDS) | {"api"},
    ("google_project_iam_member", "service_writes_traces"): set(STEP_KINDS) | {"api"},
    ("google_cloud_run_v2_service_iam_member", "build_deploys"): set(STEP_KINDS) | {"api"},
    ("google_service_account_iam_member", "build_acts_as_service"): set(STEP_KINDS) | {"api"},
    ("google_cloud_run_v2_service_iam_member", "push_invoker"): set(STEP_KINDS),
    ("google_storage_bucket_iam_member", "services_write_files"): {"ingest", "tool_step", "api"},
    ("google_storage_bucket_iam_member", "model_step_reads_files"): {"model_step"},
    ("google_pubsub_topic_iam_member", "service_publishes"): {
        f"{service}/{topic}"
        for service, topics in {
            "ingest": ("model_steps", "tool_steps", "answers", "queries"),
            "model_step": ("model_steps", "tool_steps", "answers", "queries"),
            "tool_step": ("model_steps", "answers", "queries"),
            "dead_letter": ("model_steps", "answers", "queries"),
            "api": ("model_steps", "tool_steps", "answers", "queries"),
        }.items()
        for topic in topics
    },
}

# Each IAM binding resource type -> the attribute naming what it grants on.
IAM_TARGETS = {
    "google_project_iam_member": "project",
    "google_pubsub_topic_iam_member": "topic",
    "google_pubsub_subscription_iam_member": "subscription",
    "google_storage_bucket_iam_member": "bucket",
    "google_secret_manager_secret_iam_member": "secret_id",
    "google_cloud_run_v2_service_iam_member": "name",
    "google_service_account_iam_member": "service_account_id",
    "google_artifact_registry_repository_iam_member": "repository",
}
RUNTIME_ACCOUNT = re.compile(r"^google_service_account\.service\[(\w+)\]\.member$")
PUSH_ENDPOINT = re.compile(r"^google_cloud_run_v2_service\.service\[(\w+)\]\.uri(.*)$")


def _env(container: dict[str, Any], name: str) -> Any:
    (value,) = [e["value"] for e in container["env"] if e["name"] == name]
    return value


def _expressions(terraform: TerraformConfig, evaluator: Evaluator) -> dict[str, str]:
    """What the tests read of a layout, as HCL expressions."""
    service = terraform.resource("google_cloud_run_v2_service", "service")
    template = block(service, "template")
    container = block(template, "containers")
    (gemini_env,) = [d for d in dynamic_blocks(container, "env")
                     if "gemini_key_services" in str(d["for_each"])]
    outputs = {name: body for item in terraform.files["outputs.tf"]["output"]
               for name, body in item.items()}
    expressions = {
        name: f"local.{name}" for name in
        ("services", "service_of", "push_targets", "request_timeout_seconds")
    }
    expressions["service_urls"] = hcl(outputs["service_urls"]["value"])
    expressions["build_services"] = hcl(outputs["build_services"]["value"])
    expressions["run"] = evaluator.instances("google_cloud_run_v2_service", "service", {
        "name": service["name"],
        "ingress": service["ingress"],
        "custom_audiences": service["custom_audiences"],
        "account": template["service_account"],
        "timeout": template["timeout"],
        "concurrency": template["max_instance_request_concurrency"],
        "min_instances": block(template, "scaling")["min_instance_count"],
        "max_instances": block(template, "scaling")["max_instance_count"],
        "memory": block(container, "resources")["limits"]["memory"],
        "function_target": _env(container, "FUNCTION_TARGET"),
        "request_timeout_env": _env(container, "ACKLOOP_REQUEST_TIMEOUT_SECONDS"),
        "memory_gib_env": _env(container, "ACKLOOP_SERVICE_MEMORY_GIB"),
        "gemini_key": gemini_env["for_each"],
    })
    for name in ("step", "dead_letter"):
        subscription = terraform.resource("google_pubsub_subscription", name)
        expressions[f"subscription_{name}"] = evaluator.instances(
            "google_pubsub_subscription", name, {
                "endpoint": block(subscription, "push_config")["push_endpoint"],
                "ack_deadline": subscription["ack_deadline_seconds"],
            })
    for (kind, name), body in terraform.resources.items():
        if kind in IAM_TARGETS or "for_each" in body:
            fields = {"role": body.get("role"), "member": body.get("member"),
                      "target": body.get(IAM_TARGETS.get(kind, ""))}
            expressions[f"{kind}__{name}"] = evaluator.instances(kind, name, fields)
    return expressions


@pytest.fixture(scope="module")
def deployed(terraform: TerraformConfig, evaluator: Evaluator) -> dict[tuple[str, str], Any]:
    """(layout, gemini_backend) -> what Terraform evaluates for it."""
    expressions = _expressions(terraform, evaluator)
    return {
        (layout, backend): evaluator.evaluate(expressions, {
            "project_id": '"my-project"', "image": '"image"',
            "service_layout": f'"{layout}"', "gemini_backend": f'"{backend}"',
        })
        for layout in LAYOUTS for backend in BACKENDS
    }


def _addresses(values: dict[str, Any], kind: str, name: str) -> set[str]:
    return set(values[f"{kind}__{name}"])


def grants(values: dict[str, Any]) -> dict[str, set[tuple[str, str, str]]]:
    """Runtime service -> every (resource type, role, target) its account is granted."""
    found: dict[str, set[tuple[str, str, str]]] = {}
    for label, instances in values.items():
        kind = label.split("__")[0]
        if kind not in IAM_TARGETS:
            continue
        for instance in instances.values():
            match = RUNTIME_ACCOUNT.match(str(instance["member"]))
            if match is not None:
                found.setdefault(match.group(1), set()).add(
                    (kind, instance["role"], str(instance["target"])))
    return found


def test_the_layout_is_steps_unless_set(terraform: TerraformConfig) -> None:
    # One service for every step kind: an idle deployment (every min_instances is 0 unless
    # set) pays one cold start per question instead of one per hop.
    assert terraform.variable_default("service_layout") == "steps"
    assert set(terraform.object_optional_defaults("min_instances").values()) == {0}
    (validation,) = terraform.variables["service_layout"]["validation"]
    assert validation["condition"] == (
        '${contains(["per_step", "steps"], var.service_layout)}')
    assert 'service_layout = \\"steps\\"' in validation["error_message"] or (
        'service_layout = "steps"' in validation["error_message"])
    description = terraform.variables["service_layout"]["description"]
    for trade_off in ("one cold start", "min_instances = { steps = 1 }", "1Gi",
                      "concurrency of 80", "request timeout", "ack deadline", "union",
                      "Gemini key"):
        assert trade_off in description, trade_off


def test_unset_the_layout_deploys_the_steps_service_and_the_api(
    terraform: TerraformConfig, evaluator: Evaluator,
) -> None:
    values = evaluator.evaluate(_expressions(terraform, evaluator),
                                {"project_id": '"my-project"', "image": '"image"'})
    assert set(values["run"]) == {"steps", "api"}
    assert values["service_of"] == {**{kind: "steps" for kind in STEP_KINDS}, "api": "api"}


def test_per_step_deploys_what_it_always_did(deployed: dict[tuple[str, str], Any]) -> None:
    values = deployed[("per_step", "api_key")]
    for (kind, name), addresses in PER_STEP_ADDRESSES.items():
        assert _addresses(values, kind, name) == addresses, f"{kind}.{name}"
    assert values["service_of"] == {kind: kind for kind in (*STEP_KINDS, "api")}
    run = values["run"]
    for name, instance in run.items():
        assert instance["function_target"] == name
        assert instance["name"] == f"ackloop-{name.replace('_', '-')}"
        assert instance["account"] == f"google_service_account.service[{name}].email"
    assert {n: i["memory"] for n, i in run.items()} == {
        "ingest": "512Mi", "model_step": "1Gi", "tool_step": "512Mi", "dead_letter": "512Mi",
        "api": "512Mi"}
    assert {n: i["concurrency"] for n, i in run.items()} == {
        "ingest": 80, "model_step": 80, "tool_step": 80, "dead_letter": 10, "api": 80}
    timeouts = delivery_numbers()["request_timeout_seconds"]
    assert {n: i["timeout"] for n, i in run.items()} == {n: f"{s}s" for n, s in timeouts.items()}
    # Each subscription pushes to its kind's service URL itself (path /).
    endpoints = {**values["subscription_step"],
                 "dead_letter": values["subscription_dead_letter"][""]}
    assert {k: e["endpoint"] for k, e in endpoints.items()} == {
        kind: f"google_cloud_run_v2_service.service[{kind}].uri" for kind in STEP_KINDS}
    assert values["build_services"] == "api dead-letter ingest model-step tool-step"


def test_steps_deploys_one_service_for_the_step_kinds_and_the_api_apart(
    deployed: dict[tuple[str, str], Any], terraform: TerraformConfig,
) -> None:
    values, before = deployed[("steps", "api_key")], deployed[("per_step", "api_key")]
    assert set(values["services"]) == {"steps", "api"}
    assert set(values["service_urls"]) == {"steps", "api"}
    assert values["build_services"] == "api steps"
    assert "all" not in values["services"], "the api's ingress is public, the steps' internal"
    assert set(values["services"]) <= set(SERVED_TARGETS), "`ackloop run` serves each target"
    assert values["service_of"] == {**{kind: "steps" for kind in STEP_KINDS}, "api": "api"}
    steps, per_step = values["run"]["steps"], before["run"]
    assert steps["function_target"] == "steps" and steps["name"] == "ackloop-steps"
    assert steps["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    assert steps["custom_audiences"] == ["ackloop-push:my-project"]
    assert steps["account"] == "google_service_account.service[steps].email"
    # One scaling unit for every kind: the largest memory, concurrency 80.
    assert steps["memory"] == "1Gi" and steps["memory_gib_env"] == "1"
    assert float(steps["memory_gib_env"]) == max(
        spec["memory_gib"] for name, spec in terraform.locals["per_step_services"].items()
        if name in STEP_KINDS)
    assert steps["concurrency"] == 80
    assert (steps["min_instances"], steps["max_instances"]) == (0, 20)
    # The longest of the kinds' request timeouts, and the service is told so.
    longest = max(values["request_timeout_seconds"][kind] for kind in STEP_KINDS)
    assert steps["timeout"] == f"{longest}s" and steps["request_timeout_env"] == str(longest)
    assert longest == max(delivery_numbers()["request_timeout_seconds"][k] for k in STEP_KINDS)
    # The api is the same service in both layouts.
    assert values["run"]["api"] == per_step["api"]


def test_each_subscription_pushes_to_the_path_of_its_kind(
    deployed: dict[tuple[str, str], Any],
) -> None:
    values, before = deployed[("steps", "api_key")], deployed[("per_step", "api_key")]
    for layout_values, service, path in ((values, "steps", "/{}"), (before, "{}", "")):
        endpoints = {**layout_values["subscription_step"],
                     "dead_letter": layout_values["subscription_dead_letter"][""]}
        assert set(endpoints) == set(STEP_KINDS)
        for kind, subscription in endpoints.items():
            match = PUSH_ENDPOINT.match(subscription["endpoint"])
            assert match is not None, subscription["endpoint"]
            assert match.groups() == (service.format(kind), path.format(kind))
            # Each subscription keeps its own kind's ack deadline in either layout.
            expected = delivery_numbers()["request_timeout_seconds"][kind]
            assert subscription["ack_deadline"] == expected, kind
    # The push identity may invoke exactly the services pushed to, which accept its audience.
    for layout in LAYOUTS:
        layout_values = deployed[(layout, "api_key")]
        pushed = {target["service"] for target in layout_values["push_targets"].values()}
        invoked = layout_values["google_cloud_run_v2_service_iam_member__push_invoker"]
        assert set(invoked) == pushed
        assert {i["target"] for i in invoked.values()} == {
            f"google_cloud_run_v2_service.service[{s}].name" for s in pushed}
        audiences = {n for n, i in layout_values["run"].items() if i["custom_audiences"]}
        assert audiences == pushed


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_steps_account_holds_what_the_step_kinds_accounts_held(
    deployed: dict[tuple[str, str], Any], backend: str,
) -> None:
    per_step = grants(deployed[("per_step", backend)])
    steps = grants(deployed[("steps", backend)])
    assert set(per_step) == {*STEP_KINDS, "api"}
    assert set(steps) == {"steps", "api"}
    union = set().union(*(per_step[kind] for kind in STEP_KINDS))
    assert steps["steps"] == union
    assert steps["api"] == per_step["api"]
    # Less least privilege: what only model_step had, every step kind's code now has.
    gemini = {g for g in per_step["model_step"] if "aiplatform" in g[1] or "secretmanager" in g[1]}
    assert len(gemini) == 1 and gemini <= steps["steps"]
    assert not gemini & per_step["ingest"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_gemini_key_reaches_the_service_that_runs_model_step(
    deployed: dict[tuple[str, str], Any], layout: str,
) -> None:
    for backend in BACKENDS:
        values = deployed[(layout, backend)]
        with_key = {name for name, i in values["run"].items() if i["gemini_key"]}
        assert with_key == ({values["service_of"]["model_step"]} if backend == "api_key"
                            else set())
