# Topic names are the defaults of the *_topic settings; the services get them through run.tf's env.
locals {
  topics = {
    queries     = "ackloop-queries"
    model_steps = "ackloop-model-steps"
    tool_steps  = "ackloop-tool-steps"
    answers     = "ackloop-answers"
    dead_letter = "ackloop-dead-letter"
  }

  # The audience of every push token: a custom audience of the push-triggered services (run.tf),
  # which the services also check (ACKLOOP_PUSH_AUTH_AUDIENCE). A fixed string, because a service
  # cannot be told its own URL (Terraform would need the service to create the service).
  push_audience = "ackloop-push:${var.project_id}"

  # Push subscriptions that drive the agent loop: key = the step kind they push to (its
  # service and path: local.push_targets, layout.tf).
  step_subscriptions = {
    ingest     = "queries"
    model_step = "model_steps"
    tool_step  = "tool_steps"
  }

  # Delivery numbers: the retry policy, the dead-letter policy's attempts and each service's
  # request timeout (for a push-triggered service also its ack deadline). The local stack reads
  # the same file (ackloop.bus.delivery), so local delivery behaves as deployed.
  delivery = jsondecode(file("${path.module}/../shared/ackloop/delivery.json"))

  # What is deployed: the file's numbers, unless a variable overrides them (they default to null).
  max_delivery_attempts = coalesce(var.max_delivery_attempts, local.delivery.max_delivery_attempts)
  retry_backoff_seconds = {
    minimum = coalesce(var.retry_backoff_seconds.minimum, local.delivery.retry_policy.minimum_backoff_seconds)
    maximum = coalesce(var.retry_backoff_seconds.maximum, local.delivery.retry_policy.maximum_backoff_seconds)
  }
  kind_request_timeout_seconds = {
    for name, seconds in local.delivery.request_timeout_seconds :
    name => coalesce(var.request_timeout_seconds[name], seconds)
  }
  # By service (and by kind, for the ack deadlines): the steps service (layout.tf) serves every
  # step kind, so it gets the longest of their timeouts.
  request_timeout_seconds = merge(local.kind_request_timeout_seconds, {
    steps = max([for kind in local.step_kinds : local.kind_request_timeout_seconds[kind]]...)
  })
}

resource "google_pubsub_topic" "topic" {
  #checkov:skip=CKV_GCP_83:Messages carry only ids and small call descriptors (never conversations); Google-managed encryption at rest is the deliberate default. Add kms_key_name here for CMEK.
  for_each = local.topics

  project = var.project_id
  name    = each.value

  # Messages carry ids, never conversations; a week covers any backlog worth replaying.
  message_retention_duration = "604800s"

  depends_on = [google_project_service.required]
}

# queries -> ingest, model_steps -> model_step, tool_steps -> tool_step (each a kind's service,
# or a path of the steps service).
# At-least-once push: a non-2xx answer (retryable error) is redelivered with exponential backoff;
# after max_delivery_attempts the message goes to the dead-letter topic.
resource "google_pubsub_subscription" "step" {
  for_each = local.step_subscriptions

  project = var.project_id
  name    = "${google_pubsub_topic.topic[each.value].name}-${replace(each.key, "_", "-")}"
  topic   = google_pubsub_topic.topic[each.value].id

  # For push the ack deadline is also the request timeout: equal to the kind's Cloud Run
  # timeout, so a delivery is never redelivered while Cloud Run may still be running it (on the
  # steps service, whose timeout is the longest of its kinds', each keeps its kind's own).
  ack_deadline_seconds       = local.request_timeout_seconds[each.key]
  message_retention_duration = "${var.message_retention_seconds}s"
  retain_acked_messages      = false

  # Exactly-once delivery is not available for push: dedupe happens in Firestore (step records).
  enable_exactly_once_delivery = false

  push_config {
    push_endpoint = "${google_cloud_run_v2_service.service[local.push_targets[each.key].service].uri}${local.push_targets[each.key].path}"

    # Cloud Run IAM verifies this token in front of the service (run.invoker, iam.tf), removes
    # its signature and passes its claims on, which the service checks (push_auth, run.tf).
    oidc_token {
      service_account_email = google_service_account.push_invoker.email
      audience              = local.push_audience
    }
  }

  retry_policy {
    minimum_backoff = "${local.retry_backoff_seconds.minimum}s"
    maximum_backoff = "${local.retry_backoff_seconds.maximum}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.topic["dead_letter"].id
    max_delivery_attempts = local.max_delivery_attempts
  }

  # Never delete the subscription for inactivity (the default expires it after 31 idle days).
  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_pubsub_topic_iam_member.service_agent_publishes_dead_letters,
    google_cloud_run_v2_service_iam_member.push_invoker,
  ]
}

# dead_letter -> the dead_letter step kind. A topic cannot be its own dead-letter topic, so the
# dead-letter subscription dead-letters to a topic of its own, where nothing pushes: a message the
# handler refused max_delivery_attempts times is parked there (readable with gcloud for
# message_retention_seconds) instead of cycling through the handler forever.
resource "google_pubsub_subscription" "dead_letter" {
  project = var.project_id
  name    = "${google_pubsub_topic.topic["dead_letter"].name}-dead-letter"
  topic   = google_pubsub_topic.topic["dead_letter"].id

  ack_deadline_seconds       = local.request_timeout_seconds.dead_letter
  message_retention_duration = "${var.message_retention_seconds}s"

  push_config {
    push_endpoint = "${google_cloud_run_v2_service.service[local.push_targets.dead_letter.service].uri}${local.push_targets.dead_letter.path}"

    oidc_token {
      service_account_email = google_service_account.push_invoker.email
      audience              = local.push_audience
    }
  }

  retry_policy {
    minimum_backoff = "${local.retry_backoff_seconds.minimum}s"
    maximum_backoff = "${local.retry_backoff_seconds.maximum}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter_parked.id
    max_delivery_attempts = local.max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.push_invoker,
    google_pubsub_topic_iam_member.service_agent_parks_dead_letters,
  ]
}

# Dead letters the dead-letter handler itself refused: parked, never pushed anywhere.
resource "google_pubsub_topic" "dead_letter_parked" {
  #checkov:skip=CKV_GCP_83:Messages carry only ids and small call descriptors (never conversations); Google-managed encryption at rest is the deliberate default. Add kms_key_name here for CMEK.
  project                    = var.project_id
  name                       = "${local.topics.dead_letter}-parked"
  message_retention_duration = "604800s"

  depends_on = [google_project_service.required]
}

# Pull only: an operator reads what was parked (gcloud pubsub subscriptions pull).
resource "google_pubsub_subscription" "dead_letter_parked" {
  project = var.project_id
  name    = "${google_pubsub_topic.dead_letter_parked.name}-pull"
  topic   = google_pubsub_topic.dead_letter_parked.id

  ack_deadline_seconds       = 60
  message_retention_duration = "${var.message_retention_seconds}s"

  expiration_policy {
    ttl = ""
  }
}

# The Pub/Sub service agent forwards to the parked topic and acknowledges what it forwarded.
resource "google_pubsub_topic_iam_member" "service_agent_parks_dead_letters" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter_parked.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "service_agent_acks_parked_letters" {
  project      = var.project_id
  subscription = google_pubsub_subscription.dead_letter.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}

# Optional: a pull subscription to read answers with gcloud. Applications attach their own.
resource "google_pubsub_subscription" "answers_pull" {
  count = var.answers_pull_subscription ? 1 : 0

  project = var.project_id
  name    = "${google_pubsub_topic.topic["answers"].name}-pull"
  topic   = google_pubsub_topic.topic["answers"].id

  ack_deadline_seconds       = 60
  message_retention_duration = "${var.message_retention_seconds}s"

  expiration_policy {
    ttl = ""
  }
}
