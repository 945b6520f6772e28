# The bytes of files (a query's attachments, a tool's output files): kept out of Firestore, in
# one bucket, under files/<sha256>-<size> (ackloop.files). Firestore documents name them.
#
# Retention follows the Firestore documents' (var.retention_days): an object is deleted that
# many days after it was last written. A run writes its query's files when it starts, so a
# file outlives its run's documents by the run's length at most; a conversation still in use
# past that finds a file gone, and the model is told so instead of reading it. 0 keeps
# everything, as in Firestore.

resource "google_storage_bucket" "files" {
  #checkov:skip=CKV_GCP_62:Objects are read and written only by the ackloop service accounts, whose requests Cloud Audit Logs (data access) records when enabled; usage logs of this bucket would add a second log bucket and nothing to audit.
  #checkov:skip=CKV_GCP_78:Objects are named by their digest and never overwritten with other bytes; versions would only keep what retention deletes.
  project  = var.project_id
  name     = coalesce(var.files.bucket_name, "${var.project_id}-ackloop-files")
  location = var.region

  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = !var.deletion_protection

  # Objects are named by their digest and never change: no versions to keep.
  versioning {
    enabled = false
  }

  dynamic "lifecycle_rule" {
    for_each = var.retention_days > 0 ? [var.retention_days] : []
    content {
      condition {
        age = lifecycle_rule.value
      }
      action {
        type = "Delete"
      }
    }
  }

  depends_on = [google_project_service.required]
}

locals {
  # Who reads and writes file bytes: ingest and the api store a query's files, tool_step a
  # tool's output files, model_step reads them to send them to Gemini. dead_letter never does.
  # By kind; the bindings go to the services that serve them (layout.tf).
  files_writer_kinds = ["ingest", "api", "tool_step"]
  files_reader_kinds = ["model_step"]
  files_writers      = toset([for kind in local.files_writer_kinds : local.service_of[kind]])
  files_readers      = toset([for kind in local.files_reader_kinds : local.service_of[kind]])
}

# Object access on this bucket only (no project-wide storage role). objectUser: create, read
# and overwrite (storing the same bytes again writes the same name); objectViewer: read.
resource "google_storage_bucket_iam_member" "services_write_files" {
  for_each = local.files_writers

  bucket = google_storage_bucket.files.name
  role   = "roles/storage.objectUser"
  member = google_service_account.service[each.key].member
}

resource "google_storage_bucket_iam_member" "model_step_reads_files" {
  for_each = local.files_readers

  bucket = google_storage_bucket.files.name
  role   = "roles/storage.objectViewer"
  member = google_service_account.service[each.key].member
}
