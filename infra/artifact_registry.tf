resource "google_artifact_registry_repository" "images" {
  #checkov:skip=CKV_GCP_84:The images hold open-source code and no secrets; Google-managed encryption at rest is the deliberate default. Add kms_key_name here for CMEK.
  project       = var.project_id
  location      = var.region
  repository_id = var.artifact_repository
  format        = "DOCKER"
  description   = "ackloop container images (one image serves every function and the API)."

  # Tags are never moved: the build tags each image with its build id and deploys by digest.
  docker_config {
    immutable_tags = true
  }

  cleanup_policy_dry_run = false

  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = var.image_retention_count
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      tag_state  = "ANY"
      older_than = "2592000s" # 30 days; the keep-recent policy wins for the newest images
    }
  }

  depends_on = [google_project_service.required]
}
