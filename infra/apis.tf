locals {
  required_apis = concat(
    [
      "artifactregistry.googleapis.com",
      "cloudbuild.googleapis.com",
      "cloudresourcemanager.googleapis.com",
      "cloudscheduler.googleapis.com",
      "cloudtasks.googleapis.com",
      "cloudtrace.googleapis.com",
      "firestore.googleapis.com",
      "iam.googleapis.com",
      "pubsub.googleapis.com",
      "run.googleapis.com",
      "secretmanager.googleapis.com",
      "storage.googleapis.com",
    ],
    var.gemini_backend == "vertex" ? ["aiplatform.googleapis.com"] : [],
  )
}

resource "google_project_service" "required" {
  for_each = toset(local.required_apis)

  project = var.project_id
  service = each.value

  # Turning an API off on destroy would break anything else in the project that uses it.
  disable_on_destroy         = false
  disable_dependent_services = false
}

data "google_project" "this" {
  project_id = var.project_id
}
