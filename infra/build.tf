# Where `gcloud builds submit` stages the source for cloudbuild.yaml. The build runs as
# ackloop-build (a user-managed service account), which reads the uploaded source with its own
# permissions: without a Storage role on the staging bucket the build fails with 403 before its
# first step. A bucket of our own, so the build account can read exactly that and nothing else
# (docs/deploy.md passes it with --gcs-source-staging-dir).
resource "google_storage_bucket" "build_source" {
  #checkov:skip=CKV_GCP_62:Holds only source tarballs that live a few days; access logs of a staging bucket add cost and nothing to audit that Cloud Build's own logs do not show.
  #checkov:skip=CKV_GCP_78:Each upload is a new object named by gcloud and deleted after a week; versions would only keep deleted tarballs.
  project  = var.project_id
  name     = "${var.project_id}-ackloop-build-source"
  location = var.region

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection

  # Source tarballs are needed only while their build runs.
  lifecycle_rule {
    condition {
      age = 7
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.required]
}

# The build account reads the staged source, on that bucket only.
resource "google_storage_bucket_iam_member" "build_reads_source" {
  bucket = google_storage_bucket.build_source.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.build.member
}
