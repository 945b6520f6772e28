# Least privilege, one binding per need. Roles are granted on the narrowest resource that works:
# topics, subscriptions, services, the secret. Firestore has no per-collection IAM, so
# roles/datastore.user is project-wide, limited to the ackloop database by an IAM condition.

locals {
  # Topics each kind publishes to (its service publishes to those of every kind it serves,
  # layout.tf). Any step may end a run (answer or budget exhausted), so
  # every step service can publish answers, and a run's end starts its conversation's next
  # queued run (a model step). ingest starts a run with its first model step; model_step fans
  # out tool steps; the last tool step of a turn starts the next model step; dead_letter fails
  # the run of a message Pub/Sub gave up on. The api creates runs itself (never through the
  # queries topic) and sends their first model step; its POST /sweep (sweep.py) re-sends the
  # step message a stalled run needs (model or tool step), fails the runs it cannot resume and
  # starts queued runs; cancelling a queued run publishes its end. An event delivered through
  # the queries topic (ingest) re-sends the tool steps it resumes. A child run's end, wherever
  # it is committed, publishes a ChildEndedMessage on the queries topic; a tool step that calls
  # a sub-agent sends the child's first model step.
  publishes = {
    ingest      = ["model_steps", "tool_steps", "answers", "queries"]
    model_step  = ["model_steps", "tool_steps", "answers", "queries"]
    tool_step   = ["model_steps", "answers", "queries"]
    dead_letter = ["model_steps", "answers", "queries"]
    api         = ["model_steps", "tool_steps", "answers", "queries"]
  }

  service_publishes = {
    for service in keys(local.services) : service => distinct(flatten([
      for kind, topics in local.publishes : topics if local.service_of[kind] == service
    ]))
  }

  publisher_bindings = merge([
    for service, topics in local.service_publishes : {
      for topic in topics : "${service}/${topic}" => { service = service, topic = topic }
    }
  ]...)

  # The services the step subscriptions push to.
  push_services = toset([for kind in local.step_kinds : local.push_targets[kind].service])

  pubsub_service_agent = "serviceAccount:${google_project_service_identity.pubsub.email}"
}

# --- Runtime service accounts ---------------------------------------------------------------

# Every service reads and writes the conversation state, step records and idempotency keys.
resource "google_project_iam_member" "firestore_user" {
  for_each = local.services

  project = var.project_id
  role    = "roles/datastore.user"
  member  = google_service_account.service[each.key].member

  condition {
    title       = "ackloop-database-only"
    description = "Only the ackloop Firestore database."
    expression  = "resource.name == \"projects/${var.project_id}/databases/${local.firestore_database}\""
  }
}

resource "google_pubsub_topic_iam_member" "service_publishes" {
  for_each = local.publisher_bindings

  project = var.project_id
  topic   = google_pubsub_topic.topic[each.value.topic].name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.service[each.value.service].member
}

# Every service sends its spans to Cloud Trace (ACKLOOP_TRACE_EXPORT).
resource "google_project_iam_member" "service_writes_traces" {
  for_each = local.services

  project = var.project_id
  role    = "roles/cloudtrace.agent"
  member  = google_service_account.service[each.key].member
}

# Vertex AI backend: only model_step calls Gemini (its service's account).
resource "google_project_iam_member" "model_step_vertex_user" {
  count = var.gemini_backend == "vertex" ? 1 : 0

  project = var.project_id
  role    = "roles/aiplatform.user"
  member  = google_service_account.service[local.service_of["model_step"]].member
}

# --- Pub/Sub push ---------------------------------------------------------------------------

# The push identity may invoke the push-triggered services (the four step kinds' or the steps
# service) and nothing else.
resource "google_cloud_run_v2_service_iam_member" "push_invoker" {
  for_each = local.push_services

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.service[each.key].name
  role     = "roles/run.invoker"
  member   = google_service_account.push_invoker.member
}

# Pub/Sub's service agent mints the OIDC tokens for the push identity (needed explicitly in
# projects created before April 2021, harmless after).
resource "google_service_account_iam_member" "service_agent_signs_push_tokens" {
  service_account_id = google_service_account.push_invoker.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_service_agent
}

# Dead-lettering: the service agent publishes to the dead-letter topic and acknowledges the
# forwarded message on the source subscription.
resource "google_pubsub_topic_iam_member" "service_agent_publishes_dead_letters" {
  project = var.project_id
  topic   = google_pubsub_topic.topic["dead_letter"].name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "service_agent_acks_dead_letters" {
  for_each = local.step_subscriptions

  project      = var.project_id
  subscription = google_pubsub_subscription.step[each.key].name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# --- HTTP API -------------------------------------------------------------------------------

resource "google_cloud_run_v2_service_iam_member" "api_invoker" {
  for_each = toset(var.api_invoker_members)

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.service["api"].name
  role     = "roles/run.invoker"
  member   = each.value
}

# The sweeper's identity may invoke the api (Cloud Scheduler's POST /sweep) and nothing else.
resource "google_cloud_run_v2_service_iam_member" "sweeper_invokes_api" {
  count = var.sweep.enabled ? 1 : 0

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.service["api"].name
  role     = "roles/run.invoker"
  member   = google_service_account.sweeper[0].member
}

# The api reads its bearer token (api.auth = "bearer") from a secret created out of band.
resource "google_secret_manager_secret_iam_member" "api_reads_bearer_token" {
  count = var.api.bearer_token_secret_id == null ? 0 : 1

  project   = var.project_id
  secret_id = var.api.bearer_token_secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.service["api"].member
}

# --- Build and deploy (cloudbuild.yaml) -----------------------------------------------------

resource "google_artifact_registry_repository_iam_member" "build_pushes_images" {
  project    = var.project_id
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.writer"
  member     = google_service_account.build.member
}

# Update (not create or delete) the ackloop services' revisions.
resource "google_cloud_run_v2_service_iam_member" "build_deploys" {
  for_each = local.services

  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.service[each.key].name
  role     = "roles/run.developer"
  member   = google_service_account.build.member
}

# A new revision runs as the service's own account, which the deployer must be allowed to use.
resource "google_service_account_iam_member" "build_acts_as_service" {
  for_each = local.services

  service_account_id = google_service_account.service[each.key].name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.build.member
}

resource "google_project_iam_member" "build_writes_logs" {
  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = google_service_account.build.member
}
