locals {
  firestore_database = var.manage_firestore_database ? google_firestore_database.main[0].name : var.firestore_database
}

resource "google_firestore_database" "main" {
  count = var.manage_firestore_database ? 1 : 0

  project     = var.project_id
  name        = var.firestore_database
  location_id = coalesce(var.firestore_location, var.region)
  type        = "FIRESTORE_NATIVE"

  # Step claims run in transactions on one run's documents; pessimistic locking is what the
  # emulator-backed tests exercise.
  concurrency_mode = "PESSIMISTIC"

  point_in_time_recovery_enablement = "POINT_IN_TIME_RECOVERY_ENABLED"
  delete_protection_state           = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  deletion_policy                   = var.deletion_protection ? "ABANDON" : "DELETE"

  depends_on = [google_project_service.required]
}

# HTTP Idempotency-Key records expire by themselves: Firestore deletes a document (typically
# within a day) once its expire_at timestamp has passed.
resource "google_firestore_field" "idempotency_expire_at" {
  project    = var.project_id
  database   = local.firestore_database
  collection = "${var.collection_prefix}idempotency"
  field      = "expire_at"

  ttl_config {}

  # No single-field index on a monotonically increasing timestamp nobody queries: it would only
  # cost writes and create a hotspot.
  index_config {}
}

# Retention (var.retention_days): the store gives every document it writes an expire_at
# timestamp (shared/ackloop/store.py, Retention) and Firestore deletes a document, typically
# within a day, once that time has passed. A TTL policy belongs to a collection group, so the
# subcollections (steps, transcript) have their own: deleting a parent never deletes them.
# retention_days = 0 writes no expire_at and creates no policy: everything is kept.
locals {
  expiring_collection_groups = {
    runs          = "${var.collection_prefix}runs"
    steps         = "steps" # runs/{run_id}/steps
    conversations = "${var.collection_prefix}conversations"
    transcript    = "transcript" # conversations/{conversation_id}/transcript
    deltas        = "deltas"     # runs/{run_id}/deltas: a streamed model call's text
    events        = "events"     # runs/{run_id}/events: a named event's payload
    poison        = "${var.collection_prefix}poison"
    dead_letters  = "${var.collection_prefix}dead_letters"
    evals         = "${var.collection_prefix}evals" # eval reports (ackloop eval)
    eval_cases    = "cases"                         # evals/{id}/cases: a report's cases
  }
}

resource "google_firestore_field" "expire_at" {
  for_each = var.retention_days > 0 ? local.expiring_collection_groups : {}

  project    = var.project_id
  database   = local.firestore_database
  collection = each.value
  field      = "expire_at"

  ttl_config {}

  # Nobody queries expire_at: no single-field index to pay for on every write.
  index_config {}
}

# runs where conversation_id == X order by created_at (a conversation's history).
resource "google_firestore_index" "runs_by_conversation" {
  project    = var.project_id
  database   = local.firestore_database
  collection = "${var.collection_prefix}runs"

  fields {
    field_path = "conversation_id"
    order      = "ASCENDING"
  }

  fields {
    field_path = "created_at"
    order      = "ASCENDING"
  }
}

# `ackloop runs list` and the API's GET /runs (store.recent_runs, the API's always by owner):
# runs where FIELD == X, newest first (a page: created_at below the last one read). With several
# filters Firestore merges these indexes, so one per filterable field is enough; with none, the
# automatic single-field index on created_at serves it.
# Key = the command's option, value = the field it filters on.
locals {
  run_list_filters = {
    status       = "status"
    agent        = "agent"
    conversation = "conversation_id"
    owner        = "owner"
  }
}

resource "google_firestore_index" "runs_newest_by" {
  for_each = local.run_list_filters

  project    = var.project_id
  database   = local.firestore_database
  collection = "${var.collection_prefix}runs"

  fields {
    field_path = each.value
    order      = "ASCENDING"
  }

  fields {
    field_path = "created_at"
    order      = "DESCENDING"
  }
}

# The sweeper's queries (sweep.py, through store.runs_in_status): runs in a status, the one it
# looked at longest ago first (progress_at). Value = the field ordered on; one index serves
# every status: running runs no step has moved lately, and queued runs (whose start message
# may have been lost). The key keeps the index's address from when each status had its own.
locals {
  sweeper_run_orders = {
    running = "progress_at"
  }
}

# runs where status == KEY order by VALUE (the sweeper).
resource "google_firestore_index" "runs_by_status" {
  for_each = local.sweeper_run_orders

  project    = var.project_id
  database   = local.firestore_database
  collection = "${var.collection_prefix}runs"

  fields {
    field_path = "status"
    order      = "ASCENDING"
  }

  fields {
    field_path = each.value
    order      = "ASCENDING"
  }
}

# The inspector's list of evals and GET /evals (store.evals.list_reports): an owner's eval
# reports, the latest started first.
resource "google_firestore_index" "evals_by_owner" {
  project    = var.project_id
  database   = local.firestore_database
  collection = "${var.collection_prefix}evals"

  fields {
    field_path = "owner"
    order      = "ASCENDING"
  }

  fields {
    field_path = "started_at"
    order      = "DESCENDING"
  }
}

# A page of an eval report's cases (up to 512 KiB of them) is read by its id alone: no index
# entries for the cases it holds.
resource "google_firestore_field" "eval_cases_unindexed" {
  project    = var.project_id
  database   = local.firestore_database
  collection = "cases"
  field      = "cases"

  index_config {}
}

# The sweeper's pass over schedules (store.schedules.due): active schedules whose next firing is
# before a time, the latest first.
resource "google_firestore_index" "schedules_due" {
  project    = var.project_id
  database   = local.firestore_database
  collection = "${var.collection_prefix}schedules"

  fields {
    field_path = "active"
    order      = "ASCENDING"
  }

  fields {
    field_path = "next_fire_at"
    order      = "DESCENDING"
  }
}
