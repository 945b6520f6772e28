output "service_urls" {
  description = "URL of each Cloud Run service, by FUNCTION_TARGET (service_layout \"steps\": steps and api)."
  value       = { for name, service in google_cloud_run_v2_service.service : name => service.uri }
}

output "build_services" {
  description = "The services cloudbuild.yaml rolls the image out to, as its _SERVICES substitution wants them (service_layout \"steps\", the default: \"steps api\"; \"per_step\": \"ingest model-step tool-step dead-letter api\")."
  value       = join(" ", [for name in keys(local.services) : replace(name, "_", "-")])
}

output "api_url" {
  description = "URL of the HTTP API service."
  value       = google_cloud_run_v2_service.service["api"].uri
}

output "topics" {
  description = "Pub/Sub topic names, by role."
  value       = { for role, topic in google_pubsub_topic.topic : role => topic.name }
}

output "subscriptions" {
  description = "Push subscription names, by the step kind they deliver to."
  value = merge(
    { for name, subscription in google_pubsub_subscription.step : name => subscription.name },
    { dead_letter = google_pubsub_subscription.dead_letter.name },
  )
}

output "answers_pull_subscription" {
  description = "Pull subscription on the answers topic (null unless answers_pull_subscription = true)."
  value       = var.answers_pull_subscription ? google_pubsub_subscription.answers_pull[0].name : null
}

output "image_repository" {
  description = "Artifact Registry path to push images to (append /ackloop:TAG)."
  value       = "${var.region}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

output "service_accounts" {
  description = "Runtime service account emails, by service."
  value       = { for name, account in google_service_account.service : name => account.email }
}

output "build_service_account" {
  description = "Service account to run cloudbuild.yaml with (gcloud builds submit --service-account)."
  value       = google_service_account.build.id
}

output "build_source_staging_dir" {
  description = "Where gcloud builds submit stages the source, readable by the build service account (--gcs-source-staging-dir)."
  value       = "gs://${google_storage_bucket.build_source.name}/source"
}

output "firestore_database" {
  description = "Firestore database id the services use."
  value       = local.firestore_database
}
