# The Cloud Run services, from ONE image; FUNCTION_TARGET selects what `ackloop run` serves.
# Which services exist is the layout's (layout.tf: local.services). Terraform owns the services;
# the build (cloudbuild.yaml) owns the image.

locals {
  # Concurrency: every service spends a request waiting on I/O (Gemini, tool HTTP APIs, Firestore,
  # Pub/Sub), so one instance serves many requests (Cloud Run's default of 80). The dead_letter
  # service runs rarely and writes one record per message: a low bound keeps a burst of
  # dead letters from fanning out into a burst of Firestore writes.
  # memory_gib is memory in GiB, what the cost ledger prices a request's time by.
  # A service per step kind, and the api (service_layout "per_step").
  per_step_services = {
    ingest = {
      description = "Turns a query from the queries topic into a run and its first model step."
      concurrency = 80
      memory      = "512Mi"
      memory_gib  = 0.5
      ingress     = "INGRESS_TRAFFIC_INTERNAL_ONLY" # reached only by Pub/Sub push
    }
    model_step = {
      description = "Runs one model call of a run and fans out its tool calls or publishes the answer."
      concurrency = 80
      memory      = "1Gi" # holds a conversation transcript and the model response
      memory_gib  = 1
      ingress     = "INGRESS_TRAFFIC_INTERNAL_ONLY"
    }
    tool_step = {
      description = "Runs one tool call of a run and, after the last one of a turn, the next model step."
      concurrency = 80
      memory      = "512Mi"
      memory_gib  = 0.5
      ingress     = "INGRESS_TRAFFIC_INTERNAL_ONLY"
    }
    dead_letter = {
      description = "Records messages Pub/Sub gave up on and fails their runs."
      concurrency = 10
      memory      = "512Mi"
      memory_gib  = 0.5
      ingress     = "INGRESS_TRAFFIC_INTERNAL_ONLY"
    }
    api = {
      description = "HTTP API (and Vertex AI Agent Engine runtime contract) for queries and answers."
      concurrency = 80
      memory      = "512Mi"
      memory_gib  = 0.5
      ingress     = "INGRESS_TRAFFIC_ALL" # callers still need roles/run.invoker (api_invoker_members)
    }
  }

  # One service for every step kind (service_layout "steps"), sized as model_step: the largest
  # memory of the kinds and the concurrency of the I/O-bound ones, for all of them.
  steps_service = merge(local.per_step_services.model_step, {
    description = "Serves every step kind under /<kind>: ingest, model_step, tool_step and dead_letter."
  })

  # Every setting the services read (shared/ackloop/config/settings.py), one name per setting. The Google
  # names (GOOGLE_CLOUD_PROJECT, GOOGLE_CLOUD_LOCATION, GOOGLE_GENAI_USE_VERTEXAI) are aliases the
  # settings accept and the google-genai SDK also reads.
  service_env = {
    GOOGLE_CLOUD_PROJECT                    = var.project_id
    ACKLOOP_FIRESTORE_DATABASE              = local.firestore_database
    ACKLOOP_COLLECTION_PREFIX               = var.collection_prefix
    ACKLOOP_QUERIES_TOPIC                   = google_pubsub_topic.topic["queries"].name
    ACKLOOP_MODEL_STEPS_TOPIC               = google_pubsub_topic.topic["model_steps"].name
    ACKLOOP_TOOL_STEPS_TOPIC                = google_pubsub_topic.topic["tool_steps"].name
    ACKLOOP_ANSWERS_TOPIC                   = google_pubsub_topic.topic["answers"].name
    ACKLOOP_DEAD_LETTER_TOPIC               = google_pubsub_topic.topic["dead_letter"].name
    ACKLOOP_MODEL_PROVIDER                  = var.model_provider
    ACKLOOP_MODEL                           = var.model
    GOOGLE_GENAI_USE_VERTEXAI               = tostring(var.gemini_backend == "vertex")
    GOOGLE_CLOUD_LOCATION                   = var.vertex_location
    ACKLOOP_MODEL_TIMEOUT_SECONDS           = tostring(var.model_timeout_seconds)
    ACKLOOP_MODEL_STREAM                    = tostring(var.model_stream.enabled)
    ACKLOOP_STREAM_FLUSH_SECONDS            = tostring(var.model_stream.flush_seconds)
    ACKLOOP_TOOL_TIMEOUT_SECONDS            = tostring(var.tool_timeout_seconds)
    ACKLOOP_APPROVAL_TIMEOUT_SECONDS        = tostring(var.approval_timeout_seconds)
    ACKLOOP_MAX_AGENT_DEPTH                 = tostring(var.max_agent_depth)
    ACKLOOP_NWS_BASE_URL                    = var.tool_endpoints.nws_base_url
    ACKLOOP_IP_ECHO_URL                     = var.tool_endpoints.ip_echo_url
    ACKLOOP_IPAPI_BASE_URL                  = var.tool_endpoints.ipapi_base_url
    ACKLOOP_LEASE_SECONDS                   = tostring(var.lease_seconds)
    ACKLOOP_DECODE_CACHE_BYTES              = tostring(var.decode_cache_bytes)
    ACKLOOP_STEP_CLAIMS                     = var.step_claims
    ACKLOOP_CLAIM_WAIT_SECONDS              = tostring(var.in_request_waits.claim_wait_seconds)
    ACKLOOP_RETRY_WAIT_SECONDS              = tostring(var.in_request_waits.retry_wait_seconds)
    ACKLOOP_MODEL_QUOTAS                    = jsonencode(var.model_quotas)
    ACKLOOP_CONCURRENCY_LIMITS              = jsonencode(var.concurrency_limits)
    ACKLOOP_SPEND_LIMITS                    = jsonencode(var.spend_limits)
    ACKLOOP_LIMITS_REFRESH_SECONDS          = tostring(var.limits_refresh_seconds)
    ACKLOOP_SWEEP_STALE_SECONDS             = tostring(var.sweep.stale_seconds)
    ACKLOOP_MAX_STEP_ATTEMPTS               = tostring(var.max_step_attempts)
    ACKLOOP_DEFAULT_MAX_STEPS               = tostring(var.run_limits.max_steps)
    ACKLOOP_DEFAULT_MAX_SECONDS             = tostring(var.run_limits.max_seconds)
    ACKLOOP_DEFAULT_MAX_TOOL_CALLS          = tostring(var.run_limits.max_tool_calls)
    ACKLOOP_LOG_LEVEL                       = var.log_level
    ACKLOOP_RETENTION_DAYS                  = tostring(var.retention_days)
    ACKLOOP_FILES_BUCKET                    = google_storage_bucket.files.name
    ACKLOOP_FILES_MAX_FILE_BYTES            = tostring(var.files.max_file_bytes)
    ACKLOOP_FILES_MAX_QUERY_BYTES           = tostring(var.files.max_query_bytes)
    ACKLOOP_FILES_MAX_COUNT                 = tostring(var.files.max_count)
    ACKLOOP_FILES_INLINE_BYTES              = tostring(var.files.inline_bytes)
    ACKLOOP_FILES_ALLOWED_URIS              = var.files.allowed_uris
    ACKLOOP_FILES_INLINE_CONCURRENCY        = tostring(var.files.inline_concurrency)
    ACKLOOP_FILES_INLINE_WAIT_SECONDS       = tostring(var.files.inline_wait_seconds)
    ACKLOOP_TRACE_EXPORT                    = var.trace_export
    ACKLOOP_API_AUTH                        = var.api.auth
    ACKLOOP_API_QUERY_TIMEOUT_SECONDS       = tostring(var.api.query_timeout_seconds)
    ACKLOOP_API_MAX_BODY_BYTES              = tostring(var.api.max_body_bytes)
    ACKLOOP_API_DOCS                        = tostring(var.api.docs)
    ACKLOOP_API_STREAM_POLL_SECONDS         = tostring(var.api.stream_poll_seconds)
    ACKLOOP_API_STREAM_MAX_SECONDS          = tostring(var.api.stream_max_seconds)
    ACKLOOP_API_STREAM_MAX_OPEN             = tostring(var.api.stream_max_open)
    ACKLOOP_API_STREAM_SEND_TIMEOUT_SECONDS = tostring(var.api.stream_send_timeout_s)
    ACKLOOP_API_STREAM_PAGE_SIZE            = tostring(var.api.stream_page_size)
    ACKLOOP_API_MAX_CONNECTIONS             = tostring(var.api.max_connections)
    ACKLOOP_API_KEEP_ALIVE_SECONDS          = tostring(var.api.keep_alive_seconds)
    ACKLOOP_API_REQUEST_READ_SECONDS        = tostring(var.api.request_read_seconds)
    ACKLOOP_API_FILES_CONCURRENCY           = tostring(var.api.files_concurrency)
    ACKLOOP_API_FILES_WAIT_SECONDS          = tostring(var.api.files_wait_seconds)
    ACKLOOP_MAX_STEPS_CEILING               = tostring(var.run_ceilings.max_steps)
    ACKLOOP_MAX_SECONDS_CEILING             = tostring(var.run_ceilings.max_seconds)
    ACKLOOP_MAX_TOOL_CALLS_CEILING          = tostring(var.run_ceilings.max_tool_calls)
    ACKLOOP_PUSH_AUTH                       = var.push_auth.mode
    # A sleeping call's wake (wakes.tf).
    ACKLOOP_WAKE_QUEUE    = google_cloud_tasks_queue.wakes.id
    ACKLOOP_WAKE_IDENTITY = google_service_account.waker.email
  }

  # Settings whose "unset" is meaningful (None in the code): set only when the variable has a value,
  # because an empty string would not parse as "unset".
  optional_service_env = {
    ACKLOOP_DEFAULT_MAX_TOKENS    = var.run_limits.max_tokens == null ? null : tostring(var.run_limits.max_tokens)
    ACKLOOP_GEMINI_BASE_URL       = var.gemini_base_url
    ACKLOOP_AGENTS                = var.agents
    ACKLOOP_API_ID_TOKEN_AUDIENCE = var.api.id_token_audience
    ACKLOOP_API_ID_TOKEN_EMAILS   = var.api.id_token_emails
    ACKLOOP_API_OPERATORS         = var.api.operators
    # What a push token must say (push_auth.mode "cloud_run_iam"): for the subscriptions'
    # audience, minted for the push identity (pubsub.tf).
    ACKLOOP_PUSH_AUTH_AUDIENCE = var.push_auth.mode == "none" ? null : local.push_audience
    ACKLOOP_PUSH_AUTH_EMAIL    = var.push_auth.mode == "none" ? null : google_service_account.push_invoker.email
    # The scheduled sweeper's identity, let through to POST /sweep by the token Cloud Run
    # checked: only under api.auth "cloud_run_iam" (under "none" every caller may sweep; the
    # other modes verify a token's signature, which Cloud Run strips: scheduler.tf refuses them).
    ACKLOOP_API_SWEEPER_EMAIL = var.api.auth == "cloud_run_iam" ? one(google_service_account.sweeper[*].email) : null
    # The token itself never reaches Terraform: the secret is mounted as a file (api only).
    ACKLOOP_API_BEARER_TOKEN_FILE = var.api.bearer_token_secret_id == null ? null : "${local.api_token_dir}/token"
    # Trace files are the local stack's: a deployment sends its spans to Cloud Trace.
    ACKLOOP_TRACE_DIR = null
    # The local stack's stand-in for Cloud Tasks: a deployment arms its wakes on wakes.tf's queue.
    ACKLOOP_TASKS_EMULATOR_HOST = null
  }

  env = merge(
    local.service_env,
    { for name, value in local.optional_service_env : name => value if value != null },
  )

  # Where the api service sees the bearer-token secret (a Secret Manager volume).
  api_token_dir = "/secrets/api-bearer-token"

  # Only model_step calls Gemini, so only its service receives the key.
  gemini_key_services = var.gemini_backend == "api_key" ? toset([local.service_of["model_step"]]) : toset([])
}

resource "google_cloud_run_v2_service" "service" {
  for_each = local.services

  project             = var.project_id
  name                = "ackloop-${replace(each.key, "_", "-")}"
  location            = var.region
  description         = each.value.description
  ingress             = each.value.ingress
  deletion_protection = var.deletion_protection

  # Push tokens carry local.push_audience (pubsub.tf): Cloud Run IAM accepts it as well as the
  # service URL.
  custom_audiences = contains(local.push_services, each.key) ? [local.push_audience] : []

  template {
    service_account = google_service_account.service[each.key].email

    # Push-triggered services: the same value is the subscription's ack deadline (pubsub.tf), so
    # Pub/Sub never redelivers a message whose first delivery Cloud Run is still allowed to run.
    # model_step >= model call + lease, tool_step >= tool call + lease (validated in variables.tf;
    # the numbers come from shared/ackloop/delivery.json unless overridden, see pubsub.tf):
    # a step that overruns its lease can be claimed again, and a request cut short is redelivered.
    # The steps service (layout.tf) gets the longest of its kinds' timeouts while each
    # subscription keeps its own kind's ack deadline: a delivery of a shorter kind still running
    # past it is delivered again, a duplicate the engine records once, as any other.
    timeout = "${local.request_timeout_seconds[each.key]}s"

    max_instance_request_concurrency = each.value.concurrency

    dynamic "volumes" {
      for_each = each.key == "api" && var.api.bearer_token_secret_id != null ? [var.api.bearer_token_secret_id] : []
      content {
        name = "api-bearer-token"
        secret {
          secret = volumes.value
          items {
            version = "latest"
            path    = "token"
          }
        }
      }
    }

    # Scale to zero by default: a step exists only while a push request is in flight. Warm
    # instances (min_instances) spare a run the cold start at each hop, at the cost of idle
    # instances (billed at the idle rate with cpu_idle).
    scaling {
      min_instance_count = var.min_instances[each.key]
      max_instance_count = var.max_instances[each.key]
    }

    containers {
      image = var.image

      ports {
        container_port = 8080
      }

      resources {
        limits = {
          cpu    = "1"
          memory = each.value.memory
        }
        # CPU only while a request is in flight: no work may outlive its request (instances are
        # throttled and reaped between requests; state lives in Firestore, never in the instance).
        cpu_idle          = true
        startup_cpu_boost = true
      }

      env {
        name  = "FUNCTION_TARGET"
        value = each.key
      }

      # The service's own request timeout (the template's timeout above): every wait the engine
      # does inside a request (a busy step, a model's retry-after) ends in time to answer.
      env {
        name  = "ACKLOOP_REQUEST_TIMEOUT_SECONDS"
        value = tostring(local.request_timeout_seconds[each.key])
      }

      # The instance's size, which the cost ledger prices a request's time by.
      env {
        name  = "ACKLOOP_SERVICE_VCPU"
        value = "1"
      }
      env {
        name  = "ACKLOOP_SERVICE_MEMORY_GIB"
        value = tostring(each.value.memory_gib)
      }

      dynamic "env" {
        for_each = local.env
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "env" {
        for_each = contains(local.gemini_key_services, each.key) ? [google_secret_manager_secret.gemini_api_key[0].secret_id] : []
        content {
          name = "GOOGLE_API_KEY"
          value_source {
            secret_key_ref {
              secret  = env.value
              version = "latest"
            }
          }
        }
      }

      dynamic "volume_mounts" {
        for_each = each.key == "api" && var.api.bearer_token_secret_id != null ? [local.api_token_dir] : []
        content {
          name       = "api-bearer-token"
          mount_path = volume_mounts.value
        }
      }

      startup_probe {
        tcp_socket {
          port = 8080
        }
        period_seconds    = 2
        failure_threshold = 15
      }
    }
  }

  lifecycle {
    # The build rolls out new images (gcloud run services update --image); gcloud also stamps
    # client fields. Terraform must not roll either back.
    ignore_changes = [
      template[0].containers[0].image,
      client,
      client_version,
    ]
  }

  depends_on = [
    google_project_service.required,
    google_secret_manager_secret_iam_member.model_step_reads_gemini_key,
  ]
}
