# One identity per service, so each gets only the permissions its own code needs (iam.tf).
resource "google_service_account" "service" {
  for_each = local.services

  project      = var.project_id
  account_id   = "ackloop-${replace(each.key, "_", "-")}"
  display_name = "ackloop ${each.key} service"
  description  = each.value.description
}

# The identity Pub/Sub uses to sign the OIDC token of every push request.
resource "google_service_account" "push_invoker" {
  project      = var.project_id
  account_id   = "ackloop-push"
  display_name = "ackloop Pub/Sub push invoker"
  description  = "Signs the OIDC tokens of push deliveries; may only invoke the push-triggered services."
}

# The identity Cloud Scheduler uses to sign the OIDC token of the sweeper's call (scheduler.tf).
resource "google_service_account" "sweeper" {
  count = var.sweep.enabled ? 1 : 0

  project      = var.project_id
  account_id   = "ackloop-sweeper"
  display_name = "ackloop sweeper"
  description  = "Signs the OIDC token of Cloud Scheduler's POST /sweep; may only invoke the api service."
}

# The identity of cloudbuild.yaml: pushes images and rolls them out to the services.
resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "ackloop-build"
  display_name = "ackloop build and deploy"
  description  = "Runs cloudbuild.yaml: pushes to the ackloop repository and updates the ackloop services' image."
}

# Pub/Sub's own service agent: signs push tokens and forwards messages to the dead-letter topic.
resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.required]
}
