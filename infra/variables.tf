# Every variable that mirrors a setting of shared/ackloop/config/settings.py keeps that setting's default,
# so a deployment behaves like the documented defaults unless terraform.tfvars says otherwise
# (tests/infra checks it).

# --- Where ---------------------------------------------------------------------------------

variable "project_id" {
  type        = string
  description = "Google Cloud project that owns every resource (services, topics, Firestore)."
}

variable "region" {
  type        = string
  description = "Region of the Cloud Run services, the Artifact Registry repository and, unless firestore_location is set, the Firestore database."
  default     = "us-central1"
}

# --- What runs -------------------------------------------------------------------------------

variable "image" {
  type        = string
  description = "Container image for the first deployment of every service (REGION-docker.pkg.dev/PROJECT/REPOSITORY/ackloop:TAG). Later images are rolled out by the build (cloudbuild.yaml); Terraform ignores image changes."
}

variable "artifact_repository" {
  type        = string
  description = "Artifact Registry repository id for the ackloop images."
  default     = "ackloop"
}

variable "image_retention_count" {
  type        = number
  description = "Most recent image versions the Artifact Registry cleanup policy keeps; older ones are deleted."
  default     = 20

  validation {
    condition     = var.image_retention_count >= 1
    error_message = "Keep at least one image version."
  }
}

variable "deletion_protection" {
  type        = bool
  description = "Protect the Cloud Run services and the Firestore database from terraform destroy."
  default     = true
}

# --- Model ----------------------------------------------------------------------------------

variable "gemini_backend" {
  type        = string
  description = "How the model_step service reaches Gemini: \"api_key\" (Gemini Developer API, key read from Secret Manager into GOOGLE_API_KEY) or \"vertex\" (Vertex AI with the service account's credentials, roles/aiplatform.user)."
  default     = "api_key"

  validation {
    condition     = contains(["api_key", "vertex"], var.gemini_backend)
    error_message = "gemini_backend must be \"api_key\" or \"vertex\"."
  }
}

variable "gemini_api_key_secret_id" {
  type        = string
  description = "Secret Manager secret (created by Terraform when gemini_backend = \"api_key\") whose latest version holds the Gemini API key. Terraform never sees the key: add it with gcloud secrets versions add."
  default     = "ackloop-gemini-api-key"
}

variable "model_provider" {
  type        = string
  description = "ACKLOOP_MODEL_PROVIDER. Deployed services default to \"gemini\" so missing credentials fail loudly instead of silently falling back to the scripted model (the code's default is \"auto\")."
  default     = "gemini"

  validation {
    condition     = contains(["auto", "gemini", "scripted"], var.model_provider)
    error_message = "model_provider must be \"auto\", \"gemini\" or \"scripted\"."
  }
}

variable "model" {
  type        = string
  description = "ACKLOOP_MODEL: Gemini model name."
  default     = "gemini-3-flash-preview"
}

variable "vertex_location" {
  type        = string
  description = "GOOGLE_CLOUD_LOCATION: Vertex AI location for Gemini calls (used when gemini_backend = \"vertex\")."
  default     = "global"
}

variable "agents" {
  type        = string
  description = "ACKLOOP_AGENTS: the agent catalog in the image, as 'package.module:attribute' (a list of Agent, or a function returning one). null: the catalog an installed package declares in the 'ackloop.agents' entry point group, else the built-in agents."
  default     = null
}

variable "gemini_base_url" {
  type        = string
  description = "ACKLOOP_GEMINI_BASE_URL: override of the Gemini endpoint (a proxy or compatible server). null leaves the SDK's default endpoint."
  default     = null
}

variable "model_stream" {
  type = object({
    enabled       = optional(bool, true)
    flush_seconds = optional(number, 0.25)
  })
  description = "ACKLOOP_MODEL_STREAM and ACKLOOP_STREAM_FLUSH_SECONDS: stream Gemini's answer to the run's event stream as delta events (Firestore documents runs/{run_id}/deltas, at most one write per flush_seconds per model call and one when it ends, so at most 1/flush_seconds writes per second per run plus one per model call)."
  default     = {}

  validation {
    condition     = var.model_stream.flush_seconds >= 0.05 && var.model_stream.flush_seconds <= 10
    error_message = "model_stream.flush_seconds must be within [0.05, 10]."
  }
}

variable "model_timeout_seconds" {
  type        = number
  description = "ACKLOOP_MODEL_TIMEOUT_SECONDS: limit on one model call."
  default     = 60

  validation {
    condition     = var.model_timeout_seconds > 0
    error_message = "model_timeout_seconds must be positive."
  }
}

# --- Tools ----------------------------------------------------------------------------------

variable "approval_timeout_seconds" {
  type        = number
  description = "ACKLOOP_APPROVAL_TIMEOUT_SECONDS: longest a tool call waits for a person's approval when neither its tool nor its run says; past it the sweeper rejects the call (at most 30 days)."
  default     = 604800

  validation {
    condition     = var.approval_timeout_seconds > 0 && var.approval_timeout_seconds <= 2592000
    error_message = "approval_timeout_seconds must be positive and at most 2592000 (30 days)."
  }
}

variable "max_agent_depth" {
  type        = number
  description = "ACKLOOP_MAX_AGENT_DEPTH: how deep sub-agents (Agent.as_tool) may nest; a call that would start a child run deeper is refused with an error the model reads."
  default     = 3

  validation {
    condition     = var.max_agent_depth >= 1 && var.max_agent_depth <= 16
    error_message = "max_agent_depth must be between 1 and 16."
  }
}

variable "tool_timeout_seconds" {
  type        = number
  description = "ACKLOOP_TOOL_TIMEOUT_SECONDS: limit on one tool call."
  default     = 30

  validation {
    condition     = var.tool_timeout_seconds > 0
    error_message = "tool_timeout_seconds must be positive."
  }
}

variable "tool_endpoints" {
  type = object({
    nws_base_url   = optional(string, "https://api.weather.gov")
    ip_echo_url    = optional(string, "https://icanhazip.com")
    ipapi_base_url = optional(string, "http://ip-api.com")
  })
  description = "Base URLs of the public APIs the built-in tools call (ACKLOOP_NWS_BASE_URL, ACKLOOP_IP_ECHO_URL, ACKLOOP_IPAPI_BASE_URL)."
  default     = {}
}

# --- Steps and runs -------------------------------------------------------------------------

variable "decode_cache_bytes" {
  type        = number
  description = "ACKLOOP_DECODE_CACHE_BYTES: memory a step function instance may keep of the transcript chunks it decoded (each turn as JSON, by its encoded bytes), so that a model step decodes only the turns it has not seen; least recently used first out. 0: every read decoded whole."
  default     = 16777216

  validation {
    condition     = var.decode_cache_bytes >= 0
    error_message = "decode_cache_bytes must not be negative."
  }
}

variable "lease_seconds" {
  type        = number
  description = "ACKLOOP_LEASE_SECONDS: how long a claimed step stays exclusive without a heartbeat (renewed every third of it). It bounds crash recovery: a redelivery that finds a dead holder's lease waits it out inside its request, then takes the step over."
  default     = 10

  validation {
    condition     = var.lease_seconds > 0
    error_message = "lease_seconds must be positive."
  }
}

variable "step_claims" {
  type        = string
  description = "ACKLOOP_STEP_CLAIMS: auto claims a step's document before its call only where a duplicate call would cost more than the claim's write (a unary model call with a long prompt, a streamed call, a tool that is not retry-safe, a call that waits); the other steps run unclaimed, one read and one commit (docs/architecture.md, Unclaimed steps). always claims every step."
  default     = "auto"

  validation {
    condition     = contains(["auto", "always"], var.step_claims)
    error_message = "step_claims must be auto or always."
  }
}

variable "model_quotas" {
  type = list(object({
    model    = string
    location = optional(string)
    rpm      = optional(number)
    tpm      = optional(number)
    mode     = optional(string, "fixed")
    headroom = optional(number, 0.02)
    shards   = optional(number)
  }))
  description = "The model quotas every service shares (ACKLOOP_MODEL_QUOTAS, docs/how-to/quotas.md): per model the agents call (\"*\": any other), its requests (rpm) and input tokens (tpm) per minute, mode fixed (the Gemini API's tiers, Provisioned Throughput) or adaptive (Vertex AI's shared pool: a 429 lowers the share, which climbs back), the headroom kept under them, and the limiter's shards (default: one per write a second at the full rate). A model step takes its call's place before it calls and waits for it acknowledged, woken by the wakes queue. Empty: no limiter."
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for q in var.model_quotas : (q.rpm != null || q.tpm != null) && contains(["fixed", "adaptive"], q.mode) && q.headroom >= 0 && q.headroom < 0.9])
    error_message = "Each model quota needs rpm or tpm, a mode of fixed or adaptive, and a headroom in [0, 0.9)."
  }
}

variable "concurrency_limits" {
  type = list(object({
    steps = optional(string, "all")
    key   = string
    limit = number
  }))
  description = "Concurrency limits every service shares (ACKLOOP_CONCURRENCY_LIMITS, docs/how-to/quotas.md): at most limit model steps (steps = \"model\"), tool calls (\"tool\"), either (\"all\") or runs at work (\"runs\") at once per key: owner, agent, tenant (the query's options.tenant) or deployment. A step over the limit waits in line, acknowledged, and is woken when a slot frees. Empty: none."
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for c in var.concurrency_limits : contains(["model", "tool", "all", "runs"], c.steps) && contains(["owner", "agent", "tenant", "deployment"], c.key) && c.limit >= 1])
    error_message = "Each concurrency limit needs steps of model, tool, all or runs, a key of owner, agent, tenant or deployment, and a limit of at least 1."
  }
}

variable "spend_limits" {
  type = list(object({
    key    = string
    period = optional(string, "day")
    usd    = number
    over   = optional(string, "wait")
  }))
  description = "Dollar budgets per key and period (ACKLOOP_SPEND_LIMITS, docs/how-to/quotas.md), checked before each paid model call: key owner, agent, tenant or deployment; period hour or day (UTC); over wait (the call waits for the next period, acknowledged) or fail (its run fails, naming the budget). Empty: none."
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for b in var.spend_limits : contains(["owner", "agent", "tenant", "deployment"], b.key) && contains(["hour", "day"], b.period) && contains(["wait", "fail"], b.over) && b.usd > 0])
    error_message = "Each spend limit needs a key of owner, agent, tenant or deployment, a period of hour or day, over of wait or fail, and a usd above 0."
  }
}

variable "limits_refresh_seconds" {
  type        = number
  description = "How often each service reads the limits an operator set while the deployment runs (ACKLOOP_LIMITS_REFRESH_SECONDS; `ackloop limits set`, PUT /limits, docs/how-to/quotas.md): a change reaches every service within this time, at one read per instance per period. 0: never read them; model_quotas, concurrency_limits and spend_limits alone hold."
  default     = 10
  nullable    = false

  validation {
    condition     = var.limits_refresh_seconds >= 0
    error_message = "limits_refresh_seconds is 0 (never read) or more."
  }
}

variable "in_request_waits" {
  type = object({
    claim_wait_seconds = optional(number, 25)
    retry_wait_seconds = optional(number, 20)
  })
  description = "Waits the engine does inside a request instead of using Pub/Sub redelivery as a timer (push ignores Retry-After and backs off exponentially). claim_wait_seconds (ACKLOOP_CLAIM_WAIT_SECONDS): longest a delivery watches a step another delivery holds before it acknowledges (live holder) or answers 503; keep it above lease_seconds so a dead holder is taken over in the same request. retry_wait_seconds (ACKLOOP_RETRY_WAIT_SECONDS): longest retry-after a model step waits out in the request; a longer one releases the step to redelivery."
  default     = {}
  nullable    = false

  validation {
    condition     = var.in_request_waits.claim_wait_seconds >= 0 && var.in_request_waits.retry_wait_seconds >= 0
    error_message = "in_request_waits must not be negative."
  }

  # Every push-triggered service must be able to wait a claim out and still answer in time.
  validation {
    condition = alltrue([
      for name in ["ingest", "model_step", "tool_step", "dead_letter"] :
      coalesce(var.request_timeout_seconds[name], local.delivery.request_timeout_seconds[name]) > var.in_request_waits.claim_wait_seconds
    ])
    error_message = "in_request_waits.claim_wait_seconds must be below every push-triggered service's request timeout."
  }
}

variable "sweep" {
  type = object({
    enabled       = optional(bool, true)
    stale_seconds = optional(number, 180)
    schedule      = optional(string, "* * * * *")
    time_zone     = optional(string, "Etc/UTC")
    region        = optional(string, null)
  })
  description = "The sweeper, a safety net for runs no message is moving: Cloud Scheduler (in region; null: var.region) calls the api's POST /sweep on schedule (cron, default every minute) with an OIDC token of the ackloop-sweeper service account, the only identity besides api_invoker_members that may invoke the api; a running run with no progress for stale_seconds (ACKLOOP_SWEEP_STALE_SECONDS) is resumed from its ledger or failed with a cause, and queued runs whose conversation is free are started. Keep stale_seconds above every step's request timeout, so a step still in its request is never swept. The scheduled call carries only that token, which Cloud Run checks and strips of its signature; under api.auth \"cloud_run_iam\" the api lets it through on POST /sweep because its claims name ackloop-sweeper (ACKLOOP_API_SWEEPER_EMAIL), under \"none\" anyone may sweep, and \"bearer\" and \"google_id_token\" (which accept only a token the api verifies) are refused while enabled. Or set enabled = false and run `ackloop runs sweep` on a schedule of your own (it needs the api service account's permissions)."
  default     = {}
  nullable    = false

  # Under service_layout "steps" every step kind runs with the steps service's timeout, the
  # longest of theirs.
  validation {
    condition = alltrue([
      for name in concat(["model_step", "tool_step"], var.service_layout == "steps" ? ["ingest", "dead_letter"] : []) :
      var.sweep.stale_seconds > coalesce(var.request_timeout_seconds[name], local.delivery.request_timeout_seconds[name])
    ])
    error_message = "sweep.stale_seconds must exceed the model_step and tool_step request timeouts (under service_layout = \"steps\", every step kind's)."
  }
}

variable "max_step_attempts" {
  type        = number
  description = "ACKLOOP_MAX_STEP_ATTEMPTS: claims of one step before the engine fails its run."
  default     = 8

  validation {
    condition     = var.max_step_attempts >= 1
    error_message = "max_step_attempts must be at least 1."
  }
}

variable "run_limits" {
  type = object({
    max_steps      = optional(number, 20)
    max_seconds    = optional(number, 300)
    max_tool_calls = optional(number, 50)
    max_tokens     = optional(number, null)
  })
  description = "Default budget of a run (ACKLOOP_DEFAULT_MAX_STEPS, _MAX_SECONDS, _MAX_TOOL_CALLS, _MAX_TOKENS); a query's options can lower them. max_tokens = null means no token budget."
  default     = {}
}

variable "run_ceilings" {
  type = object({
    max_steps      = optional(number, 100)
    max_seconds    = optional(number, 3600)
    max_tool_calls = optional(number, 200)
  })
  description = "Most a caller may ask for in a query's options (ACKLOOP_MAX_STEPS_CEILING, _MAX_SECONDS_CEILING, _MAX_TOOL_CALLS_CEILING): a request above a ceiling is answered 422 by the API and recorded as poison by ingest."
  default     = {}
  nullable    = false

  validation {
    condition = (var.run_ceilings.max_steps >= 1 && var.run_ceilings.max_steps <= 1000
      && var.run_ceilings.max_seconds > 0 && var.run_ceilings.max_seconds <= 86400
    && var.run_ceilings.max_tool_calls >= 0 && var.run_ceilings.max_tool_calls <= 10000)
    error_message = "run_ceilings: max_steps 1..1000, max_seconds 0..86400, max_tool_calls 0..10000."
  }
}

variable "collection_prefix" {
  type        = string
  description = "ACKLOOP_COLLECTION_PREFIX: prefix of the top-level Firestore collections (lets two deployments share one database). The TTL policies of the top-level collections and the composite indexes follow it."
  default     = ""

  validation {
    condition     = can(regex("^[a-z0-9_]*$", var.collection_prefix))
    error_message = "collection_prefix may hold only lower-case letters, digits and underscores."
  }
}

variable "retention_days" {
  type        = number
  description = "ACKLOOP_RETENTION_DAYS: days Firestore keeps a run's documents (the run and its steps) after the run ended, a conversation and its transcript after its last run, and poison and dead letters after they were recorded; then the TTL policies of firestore.tf delete them, typically within a day. 0 keeps everything (no expire_at is written and no TTL policy is created). The steps and transcript policies are on unprefixed collection groups: two deployments sharing a database declare them once."
  default     = 30

  validation {
    condition     = var.retention_days >= 0 && var.retention_days <= 36500 && floor(var.retention_days) == var.retention_days
    error_message = "retention_days must be a whole number of days from 0 (keep everything) to 36500."
  }
}

variable "files" {
  type = object({
    bucket_name         = optional(string, null)
    max_file_bytes      = optional(number, 7340032)
    max_query_bytes     = optional(number, 14680064)
    max_count           = optional(number, 10)
    inline_bytes        = optional(number, 7340032)
    allowed_uris        = optional(string, "")
    inline_concurrency  = optional(number, 2)
    inline_wait_seconds = optional(number, 5)
  })
  description = "Files in a query (storage.tf): the bucket their bytes are kept in (bucket_name; null: \"<project_id>-ackloop-files\"; ACKLOOP_FILES_BUCKET), deleted retention_days after they were written. max_file_bytes (ACKLOOP_FILES_MAX_FILE_BYTES): the largest file a query may carry inline; max_query_bytes: all of a query's inline files together; max_count: files per query (inline and URIs); the API answers 413 past them. inline_bytes (ACKLOOP_FILES_INLINE_BYTES): a stored file at most this large is sent to Gemini inline, a larger one as its gs:// URI, which only Vertex AI reads. The API's routes that take files accept api.max_body_bytes plus the base64 of max_query_bytes; keep that under Cloud Run's 32 MiB request limit. allowed_uris (ACKLOOP_FILES_ALLOWED_URIS): comma-separated gs://bucket[/prefix] and https://host[/prefix] prefixes a question's file URIs may lie under (Gemini on Vertex AI reads gs:// URIs as the service identity: list only what every caller may read); empty, the default, takes inline files only; the files bucket is refused whatever is listed. inline_concurrency (ACKLOOP_FILES_INLINE_CONCURRENCY): model requests inlining more than 1 MiB of files one model_step instance builds at once (about 70 MiB each); another waits inline_wait_seconds, then is redelivered."
  default     = {}

  validation {
    condition     = var.files.max_file_bytes >= 1 && var.files.max_query_bytes >= 1 && var.files.max_count >= 0 && var.files.max_count <= 100 && var.files.inline_bytes >= 0
    error_message = "files: max_file_bytes and max_query_bytes must be >= 1, max_count from 0 to 100, inline_bytes >= 0."
  }

  validation {
    condition     = var.api.max_body_bytes + ceil(var.files.max_query_bytes * 4 / 3) + 1024 * var.files.max_count <= 33554432
    error_message = "files.max_query_bytes (as base64) plus api.max_body_bytes must fit Cloud Run's 32 MiB request limit."
  }
}

variable "trace_export" {
  type        = string
  description = "ACKLOOP_TRACE_EXPORT: where the services send their spans (one trace per run across every service): \"auto\" (Cloud Trace on Cloud Run), \"cloud_trace\" or \"none\"."
  default     = "auto"

  validation {
    condition     = contains(["auto", "cloud_trace", "none"], var.trace_export)
    error_message = "trace_export must be auto, cloud_trace or none (trace files are for the local stack)."
  }
}

variable "log_level" {
  type        = string
  description = "ACKLOOP_LOG_LEVEL: Python log level of every service."
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], var.log_level)
    error_message = "log_level must be a Python log level name."
  }
}

# --- Cloud Run ------------------------------------------------------------------------------

variable "request_timeout_seconds" {
  type = object({
    ingest      = optional(number)
    model_step  = optional(number)
    tool_step   = optional(number)
    dead_letter = optional(number)
    api         = optional(number)
  })
  description = "Overrides of the Cloud Run request timeouts in shared/ackloop/delivery.json (unset: the file's, which the local stack uses too; ingest 60, model_step 120, tool_step 90, dead_letter 60, api 360 s). For the four push-triggered services the timeout is also the subscription's ack deadline (Pub/Sub caps it at 600 s). Under service_layout = \"steps\" the steps service gets the longest of the four, and each subscription keeps its own kind's ack deadline. model_step must cover a model call plus a lease (model_timeout_seconds + lease_seconds), tool_step a tool call plus a lease; the api must cover a streamed run (run_limits.max_seconds)."
  default     = {}
  nullable    = false

  # Every check applies to the deployed value: the override, else the file's number (as
  # local.request_timeout_seconds in pubsub.tf; a validation must name its own variable).
  validation {
    condition = alltrue([
      for name in ["ingest", "model_step", "tool_step", "dead_letter"] :
      coalesce(var.request_timeout_seconds[name], local.delivery.request_timeout_seconds[name]) >= 10 &&
      coalesce(var.request_timeout_seconds[name], local.delivery.request_timeout_seconds[name]) <= 600
    ])
    error_message = "Push-triggered services need 10 <= timeout <= 600 s: the timeout is also the Pub/Sub ack deadline."
  }

  validation {
    condition     = coalesce(var.request_timeout_seconds.model_step, local.delivery.request_timeout_seconds.model_step) >= var.model_timeout_seconds + var.lease_seconds
    error_message = "request_timeout_seconds.model_step must be >= model_timeout_seconds + lease_seconds."
  }

  validation {
    condition     = coalesce(var.request_timeout_seconds.tool_step, local.delivery.request_timeout_seconds.tool_step) >= var.tool_timeout_seconds + var.lease_seconds
    error_message = "request_timeout_seconds.tool_step must be >= tool_timeout_seconds + lease_seconds."
  }

  validation {
    condition     = coalesce(var.request_timeout_seconds.api, local.delivery.request_timeout_seconds.api) >= 1 && coalesce(var.request_timeout_seconds.api, local.delivery.request_timeout_seconds.api) <= 3600
    error_message = "Cloud Run allows request timeouts up to 3600 s."
  }
}

# max_instances and min_instances: layout.tf, with the services they bound.

variable "api_invoker_members" {
  type        = list(string)
  description = "IAM members allowed to call the HTTP API service (e.g. \"user:you@example.com\", \"group:team@example.com\"). The API is never public: allUsers and allAuthenticatedUsers are refused."
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for member in var.api_invoker_members : !contains(["allusers", "allauthenticatedusers"], lower(trimspace(member)))])
    error_message = "api_invoker_members must not contain allUsers or allAuthenticatedUsers: the API is never public (name users, groups or service accounts)."
  }
}

variable "api" {
  type = object({
    auth                   = optional(string, "cloud_run_iam")
    bearer_token_secret_id = optional(string, null)
    id_token_audience      = optional(string, null)
    id_token_emails        = optional(string, null)
    operators              = optional(string, null)
    query_timeout_seconds  = optional(number, 50)
    max_body_bytes         = optional(number, 262144)
    docs                   = optional(bool, false)
    stream_poll_seconds    = optional(number, 0.5)
    stream_max_seconds     = optional(number, 300)
    stream_max_open        = optional(number, 200)
    stream_send_timeout_s  = optional(number, 30)
    stream_page_size       = optional(number, 20)
    max_connections        = optional(number, 1000)
    keep_alive_seconds     = optional(number, 5)
    request_read_seconds   = optional(number, 30)
    files_concurrency      = optional(number, 2)
    files_wait_seconds     = optional(number, 10)
  })
  description = "HTTP API service settings (ACKLOOP_API_*). docs: serve /docs and /redoc (ACKLOOP_API_DOCS; off: their pages load scripts from a CDN on the run inspector's origin). Cloud Run IAM (api_invoker_members) always guards the service; auth adds a check in the app: \"cloud_run_iam\" (the default: the token Cloud Run verified names each caller by their own Google subject, so each invoker sees and acts on only their own runs; when id_token_emails is set it must name one of those comma-separated emails, and carry id_token_audience when set), \"none\" (no check: every invoker is the same anonymous caller, sees every run and is an operator; the service warns at start-up), \"bearer\" (token in the Secret Manager secret bearer_token_secret_id, mounted as a file; callers send the IAM token in X-Serverless-Authorization) or \"google_id_token\" (audience id_token_audience, optional comma-separated id_token_emails; the app verifies the signature, so callers send the IAM token in X-Serverless-Authorization). The scheduled sweeper (sweep.enabled) needs \"cloud_run_iam\" or \"none\" (ACKLOOP_API_SWEEPER_EMAIL). operators: comma-separated callers as the API names them (\"bearer\", \"google:<subject>\") who may list dead letters and poison and re-drive dead letters (GET /dead-letters, GET /poison, the inspector at /ui; ACKLOOP_API_OPERATORS); unset, no caller may unless auth is \"none\". Keep stream_max_seconds and query_timeout_seconds below request_timeout_seconds.api. Against hostile callers: stream_max_open event streams per instance (then 503), stream_send_timeout_s for a client that stops reading, stream_page_size step documents per stream read, max_connections per instance (uvicorn limit_concurrency), keep_alive_seconds, request_read_seconds to send a request (then 408), files_concurrency bodies over max_body_bytes on the routes that take files read at once per instance (about 100 MiB each at the largest; another waits files_wait_seconds, its body unread, then 503 with Retry-After)."
  default     = {}

  validation {
    condition     = contains(["none", "bearer", "google_id_token", "cloud_run_iam"], var.api.auth)
    error_message = "api.auth must be none, bearer, google_id_token or cloud_run_iam."
  }

  validation {
    condition     = var.api.auth != "bearer" || var.api.bearer_token_secret_id != null
    error_message = "api.auth = \"bearer\" needs api.bearer_token_secret_id."
  }

  validation {
    condition     = var.api.auth != "google_id_token" || var.api.id_token_audience != null
    error_message = "api.auth = \"google_id_token\" needs api.id_token_audience."
  }
}

variable "push_auth" {
  type = object({
    mode = optional(string, "cloud_run_iam")
  })
  description = "What the step services check of a Pub/Sub push token themselves (ACKLOOP_PUSH_AUTH). Cloud Run IAM verifies the token in front of them (only ackloop-push may invoke them) and removes its signature; with mode \"cloud_run_iam\" (default) each service also checks the forwarded claims: minted for ackloop-push (ACKLOOP_PUSH_AUTH_EMAIL), for the subscriptions' audience (ACKLOOP_PUSH_AUTH_AUDIENCE), by Google, unexpired. \"none\" leaves it to Cloud Run IAM alone. \"oidc\" (the app verifying the signature) is refused: behind Cloud Run IAM no signature is left to verify."
  default     = {}
  nullable    = false

  validation {
    condition     = contains(["none", "cloud_run_iam"], var.push_auth.mode)
    error_message = "push_auth.mode must be \"cloud_run_iam\" or \"none\". \"oidc\" cannot work here: every ackloop service requires Cloud Run IAM, which verifies the push token and removes its signature before the service sees it, so an in-app signature check would refuse every push and dead-letter every step."
  }
}

# --- Pub/Sub --------------------------------------------------------------------------------

variable "max_delivery_attempts" {
  type        = number
  description = "Override of max_delivery_attempts in shared/ackloop/delivery.json (null: the file's, 10, which the local stack uses too): deliveries of one message before Pub/Sub forwards it to the dead-letter topic (5..100). Keep it above max_step_attempts so the engine fails a run cleanly before Pub/Sub gives up on its message."
  default     = null

  # Every check applies to the deployed value: the override, else the file's number (as
  # local.max_delivery_attempts in pubsub.tf; a validation must name its own variable).
  validation {
    condition = (
      coalesce(var.max_delivery_attempts, local.delivery.max_delivery_attempts) >= 5 &&
      coalesce(var.max_delivery_attempts, local.delivery.max_delivery_attempts) <= 100
    )
    error_message = "Pub/Sub accepts max_delivery_attempts between 5 and 100."
  }

  validation {
    condition     = coalesce(var.max_delivery_attempts, local.delivery.max_delivery_attempts) > var.max_step_attempts
    error_message = "max_delivery_attempts must exceed max_step_attempts."
  }
}

variable "retry_backoff_seconds" {
  type = object({
    minimum = optional(number)
    maximum = optional(number)
  })
  description = "Overrides of the retry policy in shared/ackloop/delivery.json (unset: the file's, minimum 10 and maximum 600 s, which the local stack follows too): exponential backoff between redeliveries of a push message that was not acknowledged."
  default     = {}
  nullable    = false

  # Checks the deployed values: each override, else the file's number (as
  # local.retry_backoff_seconds in pubsub.tf; a validation must name its own variable).
  validation {
    condition = (
      coalesce(var.retry_backoff_seconds.minimum, local.delivery.retry_policy.minimum_backoff_seconds) >= 0 &&
      coalesce(var.retry_backoff_seconds.minimum, local.delivery.retry_policy.minimum_backoff_seconds) <=
      coalesce(var.retry_backoff_seconds.maximum, local.delivery.retry_policy.maximum_backoff_seconds) &&
      coalesce(var.retry_backoff_seconds.maximum, local.delivery.retry_policy.maximum_backoff_seconds) <= 600
    )
    error_message = "Pub/Sub needs 0 <= minimum <= maximum <= 600 seconds."
  }
}

variable "message_retention_seconds" {
  type        = number
  description = "How long an unacknowledged message is kept on a subscription (Pub/Sub allows 600..604800 s)."
  default     = 604800

  validation {
    condition     = var.message_retention_seconds >= 600 && var.message_retention_seconds <= 604800
    error_message = "message_retention_seconds must be between 600 and 604800."
  }
}

variable "answers_pull_subscription" {
  type        = bool
  description = "Create a pull subscription \"ackloop-answers-pull\" on the answers topic (handy for reading answers with gcloud). Users may instead attach their own subscriptions."
  default     = false
}

# --- Firestore ------------------------------------------------------------------------------

variable "manage_firestore_database" {
  type        = bool
  description = "Create the Firestore (Native) database. Set false when the project already has it; the TTL policy and index are created either way."
  default     = true
}

variable "firestore_database" {
  type        = string
  description = "ACKLOOP_FIRESTORE_DATABASE: Firestore database id."
  default     = "(default)"
}

variable "firestore_location" {
  type        = string
  description = "Firestore location (a region such as us-central1 or a multi-region such as nam5). null means var.region."
  default     = null
}
