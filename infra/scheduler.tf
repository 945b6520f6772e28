# The sweeper's clock. Pub/Sub redelivers whatever was not acknowledged, so a run stops moving
# only when a message that should exist does not (a publish lost after its commit). Cloud
# Scheduler calls the api's POST /sweep (shared/ackloop/engine/sweep.py) on var.sweep.schedule: it
# resumes running runs idle for ACKLOOP_SWEEP_STALE_SECONDS by re-sending the step message their
# ledger says they need, fails those it cannot resume, and starts queued runs whose conversation
# is free. Sweeping is idempotent: a healthy run costs a message, never a second execution.

locals {
  # Cloud Scheduler gives an HTTP target 15 s to 30 min. Waiting longer than the api's own
  # request timeout would only turn Cloud Run's 504 into Cloud Scheduler's.
  sweep_attempt_deadline_seconds = min(local.request_timeout_seconds.api, 1800)
}

resource "google_cloud_scheduler_job" "sweep" {
  count = var.sweep.enabled ? 1 : 0

  project          = var.project_id
  region           = coalesce(var.sweep.region, var.region)
  name             = "ackloop-sweep"
  description      = "Resumes stalled ackloop runs: POST /sweep on the api service."
  schedule         = var.sweep.schedule
  time_zone        = var.sweep.time_zone
  attempt_deadline = "${local.sweep_attempt_deadline_seconds}s"

  # The next scheduled call is the retry: each sweep looks at every stalled run again.
  retry_config {
    retry_count = 0
  }

  http_target {
    # No query string: the api sweeps runs idle for ACKLOOP_SWEEP_STALE_SECONDS (run.tf).
    http_method = "POST"
    uri         = "${google_cloud_run_v2_service.service["api"].uri}/sweep"

    # Cloud Run IAM checks this token (roles/run.invoker, iam.tf); its audience is the
    # service URL, which Cloud Run accepts without a custom audience. Cloud Run removes its
    # signature; under api.auth "cloud_run_iam" the api lets its claims through on POST /sweep
    # (ACKLOOP_API_SWEEPER_EMAIL, run.tf), under "none" anyone may sweep.
    oidc_token {
      service_account_email = google_service_account.sweeper[0].email
      audience              = google_cloud_run_v2_service.service["api"].uri
    }
  }

  lifecycle {
    precondition {
      condition     = local.sweep_attempt_deadline_seconds >= 15
      error_message = "Cloud Scheduler waits at least 15 s for an HTTP target: request_timeout_seconds.api must be at least 15 for the sweeper."
    }
    precondition {
      condition     = contains(["cloud_run_iam", "none"], var.api.auth)
      error_message = "The scheduled sweeper can send only its OIDC token, whose signature Cloud Run strips; api.auth \"bearer\" and \"google_id_token\" accept only a token the api verifies itself, so they would refuse every sweep. Use api.auth = \"cloud_run_iam\", or set sweep = { enabled = false } and run `ackloop runs sweep` on a schedule of your own."
    }
  }

  depends_on = [
    google_project_service.required,
    google_cloud_run_v2_service_iam_member.sweeper_invokes_api,
  ]
}
