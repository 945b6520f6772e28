# The Gemini API key lives only in Secret Manager. Terraform creates the empty secret; the key is
# added out of band (gcloud secrets versions add), so it never reaches Terraform state.
resource "google_secret_manager_secret" "gemini_api_key" {
  count = var.gemini_backend == "api_key" ? 1 : 0

  project   = var.project_id
  secret_id = var.gemini_api_key_secret_id

  replication {
    auto {}
  }

  depends_on = [google_project_service.required]
}

# Only model_step calls Gemini, so only its service's account may read the key.
resource "google_secret_manager_secret_iam_member" "model_step_reads_gemini_key" {
  count = var.gemini_backend == "api_key" ? 1 : 0

  project   = var.project_id
  secret_id = google_secret_manager_secret.gemini_api_key[0].secret_id
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.service[local.service_of["model_step"]].member
}
