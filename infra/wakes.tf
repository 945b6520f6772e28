# The wake queue. It publishes schedules' ticks at their times (shared/ackloop/engine/schedule_firing.py),
# and wakes calls that sleep. A call that sleeps (a tool with `sleeps`, or the built-in sleep tool) records
# its wake time and arms a Cloud Tasks task for it (shared/ackloop/bus/wakes.py): at that time
# the task publishes the step's own message to its topic, with an OAuth token of the waker
# identity, and the step runs through the ordinary push path. Nothing runs and nothing is
# delivered while it sleeps. Why Cloud Tasks (docs/how-to/sleeps-and-schedules.md): Pub/Sub has
# no delayed delivery; Cloud Scheduler's finest period is a minute and it is priced per job; a
# task is scheduled to the second, up to 30 days ahead (a longer sleep is armed again when its
# early wake finds its time not come), and costs an operation. A lost or refused wake is the
# sweeper's to find: it looks at a sleeping run at its wake time (ACKLOOP_SWEEP_STALE_SECONDS).

locals {
  # The kinds that arm wakes: the tool step records a call's sleep and arms its wake, and a
  # delivery that finds the call still asleep arms it again; ingest fires a schedule's tick and
  # arms its next one; the api creates and resumes schedules, and its POST /sweep arms what a
  # lost wake left and the catalog's new schedules.
  wake_arming_kinds = ["tool_step", "ingest", "api"]
  wake_arming_services = toset([
    for kind in local.wake_arming_kinds : local.service_of[kind]
  ])
  # What a wake publishes: a sleeping call's own step message, a schedule's tick (on the
  # queries topic, which ingest is pushed).
  wake_topics = toset(["tool_steps", "queries"])
}

resource "google_cloud_tasks_queue" "wakes" {
  project  = var.project_id
  location = var.region
  name     = "ackloop-wakes"

  rate_limits {
    max_dispatches_per_second = 500
    max_concurrent_dispatches = 1000
  }

  # A publish that fails is tried again until it is taken: the step's message must go out.
  # Every delivery of it is absorbed by the step's claim, so a retry never runs a call twice.
  retry_config {
    max_attempts  = -1
    min_backoff   = "1s"
    max_backoff   = "300s"
    max_doublings = 8
  }

  depends_on = [google_project_service.required]
}

resource "google_service_account" "waker" {
  project      = var.project_id
  account_id   = "ackloop-waker"
  display_name = "ackloop wakes"
  description  = "Publishes a sleeping call's step message at its time (Cloud Tasks' OAuth token); may publish to the topics woken and nothing else."
}

resource "google_pubsub_topic_iam_member" "waker_publishes" {
  for_each = local.wake_topics

  project = var.project_id
  topic   = google_pubsub_topic.topic[each.key].name
  role    = "roles/pubsub.publisher"
  member  = google_service_account.waker.member
}

# The services that arm wakes may add tasks to the queue (not read, run or delete them) ...
resource "google_cloud_tasks_queue_iam_member" "services_arm_wakes" {
  for_each = local.wake_arming_services

  project  = var.project_id
  location = google_cloud_tasks_queue.wakes.location
  name     = google_cloud_tasks_queue.wakes.name
  role     = "roles/cloudtasks.enqueuer"
  member   = google_service_account.service[each.key].member
}

# ... with the waker's token on them: Cloud Tasks requires the creator to act as it.
resource "google_service_account_iam_member" "services_act_as_waker" {
  for_each = local.wake_arming_services

  service_account_id = google_service_account.waker.name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.service[each.key].member
}
