"""Pub/Sub push wiring, Cloud Run service settings and least-privilege IAM, as declared."""

from __future__ import annotations

from typing import Any

from ackloop.api.app import create_app
from ackloop.config.settings import Settings
from tests.infra.terraform import TerraformConfig, block, delivery_numbers, expression

PUSH_SERVICES = {"ingest", "model_step", "tool_step", "dead_letter"}
# The runtime layout: which topic drives which service.
EXPECTED_STEP_SUBSCRIPTIONS = {
    "ingest": "queries",
    "model_step": "model_steps",
    "tool_step": "tool_steps",
}
PUBSUB_MAX_ACK_DEADLINE = 600


def _push(subscription: dict[str, Any], target: str) -> None:
    push = block(subscription, "push_config")
    # The kind's service URL, and on the steps service the kind's path (test_service_layout.py).
    uri = (f"${{google_cloud_run_v2_service.service[{target}.service].uri}}"
           f"${{{target}.path}}")
    assert push["push_endpoint"] == uri, "push to the URL of the kind's service (and path)"
    token = block(push, "oidc_token")
    assert token["audience"] == "${local.push_audience}", "one configured push audience"
    assert token["service_account_email"] == "${google_service_account.push_invoker.email}"


def test_step_subscriptions_follow_the_runtime_layout(terraform: TerraformConfig) -> None:
    assert terraform.locals["step_subscriptions"] == EXPECTED_STEP_SUBSCRIPTIONS
    step = terraform.resource("google_pubsub_subscription", "step")
    assert step["for_each"] == "${local.step_subscriptions}"
    assert step["topic"] == "${google_pubsub_topic.topic[each.value].id}"
    dead_letter = terraform.resource("google_pubsub_subscription", "dead_letter")
    assert dead_letter["topic"] == '${google_pubsub_topic.topic["dead_letter"].id}'


def test_push_endpoints_are_the_service_urls_and_tokens_carry_the_push_audience(
    terraform: TerraformConfig,
) -> None:
    _push(terraform.resource("google_pubsub_subscription", "step"),
          "local.push_targets[each.key]")
    _push(terraform.resource("google_pubsub_subscription", "dead_letter"),
          "local.push_targets.dead_letter")
    # Cloud Run IAM accepts a token for a custom audience only if the service declares it.
    service = terraform.resource("google_cloud_run_v2_service", "service")
    assert service["custom_audiences"] == (
        "${contains(local.push_services, each.key) ? [local.push_audience] : []}"
    )
    assert "var.project_id" in terraform.locals["push_audience"]


def test_the_offered_push_auth_is_the_one_that_works_behind_cloud_run_iam(
    terraform: TerraformConfig,
) -> None:
    """Every ackloop service requires Cloud Run IAM, which verifies the push token and removes its
    signature: an in-app signature check ("oidc") would refuse every push. Terraform offers the
    claims check on the forwarded token by default and refuses "oidc"."""
    assert terraform.variable_default("push_auth", "mode") == "cloud_run_iam"
    (validation,) = terraform.variables["push_auth"]["validation"]
    assert validation["condition"] == '${contains(["none", "cloud_run_iam"], var.push_auth.mode)}'
    assert "oidc" in validation["error_message"] and "signature" in validation["error_message"]
    env = terraform.locals["optional_service_env"]
    assert env["ACKLOOP_PUSH_AUTH_AUDIENCE"] == (
        '${var.push_auth.mode == "none" ? null : local.push_audience}')
    assert env["ACKLOOP_PUSH_AUTH_EMAIL"] == (
        '${var.push_auth.mode == "none" ? null : google_service_account.push_invoker.email}')
    # Nothing deployed is reachable without Cloud Run IAM: no service grants allUsers.
    for name, body in terraform.resources_of("google_cloud_run_v2_service_iam_member").items():
        assert "allUsers" not in str(body["member"]), name


def test_step_subscriptions_dead_letter_and_back_off(terraform: TerraformConfig) -> None:
    step = terraform.resource("google_pubsub_subscription", "step")
    policy = block(step, "dead_letter_policy")
    assert policy["dead_letter_topic"] == '${google_pubsub_topic.topic["dead_letter"].id}'
    assert policy["max_delivery_attempts"] == "${local.max_delivery_attempts}"
    numbers = delivery_numbers()
    attempts = numbers["max_delivery_attempts"]
    assert 5 <= attempts <= 100
    assert attempts > terraform.variable_default("max_step_attempts"), (
        "the engine should fail a run before Pub/Sub dead-letters its message"
    )
    for subscription in (step, terraform.resource("google_pubsub_subscription", "dead_letter")):
        retry = block(subscription, "retry_policy")
        assert "local.retry_backoff_seconds.minimum" in retry["minimum_backoff"]
        assert "local.retry_backoff_seconds.maximum" in retry["maximum_backoff"]
        assert block(subscription, "expiration_policy")["ttl"] == ""
    minimum = numbers["retry_policy"]["minimum_backoff_seconds"]
    maximum = numbers["retry_policy"]["maximum_backoff_seconds"]
    assert 0 < minimum <= maximum <= PUBSUB_MAX_ACK_DEADLINE


def test_ack_deadline_is_the_service_timeout(terraform: TerraformConfig) -> None:
    service = terraform.resource("google_cloud_run_v2_service", "service")
    assert block(service, "template")["timeout"] == "${local.request_timeout_seconds[each.key]}s"
    step = terraform.resource("google_pubsub_subscription", "step")
    assert step["ack_deadline_seconds"] == "${local.request_timeout_seconds[each.key]}"
    dead_letter = terraform.resource("google_pubsub_subscription", "dead_letter")
    assert dead_letter["ack_deadline_seconds"] == "${local.request_timeout_seconds.dead_letter}"
    for name in PUSH_SERVICES:
        timeout = delivery_numbers()["request_timeout_seconds"][name]
        assert 10 <= timeout <= PUBSUB_MAX_ACK_DEADLINE, f"{name}: ack deadline caps at 600 s"


def test_step_timeouts_cover_a_call_plus_a_lease(terraform: TerraformConfig) -> None:
    lease = terraform.variable_default("lease_seconds")
    timeouts = delivery_numbers()["request_timeout_seconds"]
    model, tool, api = timeouts["model_step"], timeouts["tool_step"], timeouts["api"]
    assert model >= terraform.variable_default("model_timeout_seconds") + lease
    assert tool >= terraform.variable_default("tool_timeout_seconds") + lease
    assert api >= terraform.variable_default("run_limits", "max_seconds"), "a streamed run fits"
    conditions = " ".join(
        v["condition"] for v in terraform.variables["request_timeout_seconds"]["validation"]
    )
    assert "var.model_timeout_seconds + var.lease_seconds" in conditions
    assert "var.tool_timeout_seconds + var.lease_seconds" in conditions


def test_services_scale_to_zero_with_bounded_instances_and_deliberate_concurrency(
    terraform: TerraformConfig,
) -> None:
    service = terraform.resource("google_cloud_run_v2_service", "service")
    template = block(service, "template")
    scaling = block(template, "scaling")
    # Warm instances per service are offered; by default every service scales to zero.
    assert scaling["min_instance_count"] == "${var.min_instances[each.key]}"
    # The steps service's spec is evaluated in test_service_layout.py.
    specs = terraform.locals["per_step_services"]
    assert set(terraform.object_optional_defaults("min_instances")) == {*specs, "steps"}
    assert set(terraform.object_optional_defaults("max_instances")) == {*specs, "steps"}
    for name in (*specs, "steps"):
        assert terraform.variable_default("min_instances", name) == 0, name
    assert scaling["max_instance_count"] == "${var.max_instances[each.key]}"
    assert template["max_instance_request_concurrency"] == "${each.value.concurrency}"
    for name, spec in specs.items():
        assert 1 <= spec["concurrency"] <= 1000, name
        assert 1 <= terraform.variable_default("max_instances", name) <= 1000
        expected = "INGRESS_TRAFFIC_ALL" if name == "api" else "INGRESS_TRAFFIC_INTERNAL_ONLY"
        assert spec["ingress"] == expected, name
    assert template["service_account"] == "${google_service_account.service[each.key].email}"


def test_the_build_owns_the_image(terraform: TerraformConfig) -> None:
    service = terraform.resource("google_cloud_run_v2_service", "service")
    ignored = block(service, "lifecycle")["ignore_changes"]
    assert "${template[0].containers[0].image}" in ignored


def test_push_invoker_may_invoke_only_the_push_services(terraform: TerraformConfig) -> None:
    binding = terraform.resource("google_cloud_run_v2_service_iam_member", "push_invoker")
    # The services the step kinds' subscriptions push to (evaluated: test_service_layout.py).
    assert set(terraform.locals["step_kinds"]) == PUSH_SERVICES
    assert expression(terraform.locals["push_services"]) == (
        "toset([for kind in local.step_kinds : local.push_targets[kind].service])")
    assert binding["for_each"] == "${local.push_services}"
    assert binding["role"] == "roles/run.invoker"
    assert binding["member"] == "${google_service_account.push_invoker.member}"
    api = terraform.resource("google_cloud_run_v2_service_iam_member", "api_invoker")
    assert api["for_each"] == "${toset(var.api_invoker_members)}"
    assert terraform.variable_default("api_invoker_members") == []


def test_pubsub_service_agent_can_dead_letter(terraform: TerraformConfig) -> None:
    agent = "${local.pubsub_service_agent}"
    publishes = terraform.resource(
        "google_pubsub_topic_iam_member", "service_agent_publishes_dead_letters"
    )
    assert publishes["topic"] == '${google_pubsub_topic.topic["dead_letter"].name}'
    assert publishes["role"] == "roles/pubsub.publisher" and publishes["member"] == agent
    acks = terraform.resource(
        "google_pubsub_subscription_iam_member", "service_agent_acks_dead_letters"
    )
    assert acks["for_each"] == "${local.step_subscriptions}"
    assert acks["subscription"] == "${google_pubsub_subscription.step[each.key].name}"
    assert acks["role"] == "roles/pubsub.subscriber" and acks["member"] == agent
    tokens = terraform.resource(
        "google_service_account_iam_member", "service_agent_signs_push_tokens"
    )
    assert tokens["role"] == "roles/iam.serviceAccountTokenCreator" and tokens["member"] == agent


def test_each_service_has_its_own_account_and_least_privilege(terraform: TerraformConfig) -> None:
    accounts = terraform.resource("google_service_account", "service")
    assert accounts["for_each"] == "${local.services}"
    publishes = terraform.locals["publishes"]  # by kind; by service: test_service_layout.py
    assert set(publishes) == set(terraform.locals["per_step_services"])
    for service, topics in publishes.items():
        assert set(topics) <= set(terraform.locals["topics"]), service
    # Every service that can end a run can end a child run, whose end is a ChildEndedMessage
    # on the queries topic (the API still creates runs itself, never through that topic).
    assert all("queries" in publishes[s] for s in ("api", "model_step", "tool_step",
                                                      "dead_letter", "ingest"))
    # ingest resumes the calls an event from the queries topic decides: it re-sends tool steps.
    assert "tool_steps" in publishes["ingest"]
    binding = terraform.resource("google_pubsub_topic_iam_member", "service_publishes")
    assert binding["role"] == "roles/pubsub.publisher"
    firestore = terraform.resource("google_project_iam_member", "firestore_user")
    assert firestore["role"] == "roles/datastore.user"
    assert "databases/${local.firestore_database}" in block(firestore, "condition")["expression"]
    # No service account gets a primitive role.
    for kind in ("google_project_iam_member",):
        for name, body in terraform.resources_of(kind).items():
            assert body["role"] not in {"roles/owner", "roles/editor", "roles/viewer"}, name


def test_answers_topic_has_only_an_optional_pull_subscription(terraform: TerraformConfig) -> None:
    pull = terraform.resource("google_pubsub_subscription", "answers_pull")
    assert expression(pull["count"]) == "var.answers_pull_subscription ? 1 : 0"
    assert "push_config" not in pull
    assert terraform.variable_default("answers_pull_subscription") is False


def test_the_deployed_api_names_each_caller_apart_by_default(terraform: TerraformConfig) -> None:
    """S2: the API's default auth was "none", under which every invoker is the same anonymous
    caller, sees every run and is an operator. The default is now "cloud_run_iam", which names
    each invoker by the token Cloud Run IAM checked and needs no email list, and the app that
    Terraform configures that way starts."""
    assert terraform.variable_default("api", "auth") == "cloud_run_iam"
    conditions = [v["condition"] for v in terraform.variables["api"]["validation"]]
    assert not [c for c in conditions if "id_token_emails" in c], conditions
    assert create_app(Settings(api_auth="cloud_run_iam")) is not None
