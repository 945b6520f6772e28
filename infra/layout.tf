# Which Cloud Run services serve the step kinds: one for all four ("steps", the default,
# FUNCTION_TARGET=steps, each kind under /<kind>), or one per kind ("per_step"). The api is a
# service of its own in both: its ingress is public, the step services' internal. What a service
# may do is the union of what the kinds it serves need, each need declared once by kind
# (local.publishes in iam.tf, the files readers and writers in storage.tf, Gemini for
# model_step) and projected onto the services through local.service_of
# (docs/deployment-layouts.md).

variable "service_layout" {
  type        = string
  description = "How the step kinds (ingest, model_step, tool_step, dead_letter) are deployed. \"steps\" (the default): one service, ackloop-steps (FUNCTION_TARGET=steps), serves every step kind under /<kind>, and each subscription pushes to <its URL>/<kind>. A question that finds every instance scaled to zero (every min_instances is 0 by default) pays one cold start instead of up to three in a row (ingest, model_step, tool_step), and min_instances = { steps = 1 } keeps every step kind warm for the price of one idle instance. The price: one scaling unit (the model step's long requests and the tool steps share its instances, its concurrency of 80 and max_instances.steps), one memory size (the largest, 1Gi), one request timeout (the longest of the step kinds'; each subscription keeps its own kind's as its ack deadline), one service account holding the union of the step kinds' roles (less least privilege: the ingest code could call Gemini), and the Gemini key secret mounted in that one service. \"per_step\": a Cloud Run service per step kind, each with its own service account, memory, concurrency, request timeout and instance bounds: for steady traffic, or where least privilege between step kinds matters. The api stays a service of its own in both. Switching replaces the step services and their service accounts and re-points the subscriptions; Pub/Sub redelivers what was in flight to the new endpoints. A deployment applied before \"steps\" became the default, with service_layout unset, keeps its services with service_layout = \"per_step\"."
  default     = "steps"
  nullable    = false

  validation {
    condition     = contains(["per_step", "steps"], var.service_layout)
    error_message = "service_layout must be \"steps\" (one service for every step kind, the default) or \"per_step\" (a Cloud Run service per step kind): set service_layout = \"steps\" or \"per_step\" in terraform.tfvars, or leave it unset. \"all\" (the HTTP API in the same service) is not offered: the api's ingress is public, the step services' internal."
  }
}

variable "max_instances" {
  type = object({
    ingest      = optional(number, 10)
    model_step  = optional(number, 20)
    tool_step   = optional(number, 20)
    dead_letter = optional(number, 2)
    steps       = optional(number, 20)
    api         = optional(number, 10)
  })
  description = "Upper bound on instances of each service (they all scale to zero). Bounds the cost of a retry storm and the write rate on Firestore. Only the services of service_layout exist: the four step kinds under \"per_step\", steps (every step kind together) under \"steps\", api in both; the other values are not used."
  default     = {}

  validation {
    condition     = alltrue([for n in values(var.max_instances) : n >= 1 && n <= 1000])
    error_message = "max_instances values must be between 1 and 1000."
  }
}

variable "min_instances" {
  type = object({
    ingest      = optional(number, 0)
    model_step  = optional(number, 0)
    tool_step   = optional(number, 0)
    dead_letter = optional(number, 0)
    steps       = optional(number, 0)
    api         = optional(number, 0)
  })
  description = "Instances of each service kept warm (default 0: every service scales to zero). Under service_layout = \"steps\" (the default) one service serves every step kind: an idle deployment pays one cold start per question, and { steps = 1 } keeps every step kind warm. Under \"per_step\" one run crosses api or ingest, model_step and tool_step in turn, so with all at zero an idle deployment can pay a cold start at each hop; 1 on model_step and tool_step (and api) removes most of that. Warm instances are billed while idle."
  default     = {}
  nullable    = false

  validation {
    condition     = alltrue([for n in values(var.min_instances) : n >= 0 && n == floor(n)])
    error_message = "min_instances values must be whole numbers >= 0."
  }

  validation {
    condition = alltrue([
      for name, n in var.min_instances : n <= coalesce(var.max_instances[name], 1000)
    ])
    error_message = "min_instances must not exceed max_instances for any service."
  }

  # Warm instances of a service the layout does not deploy would be a silent no-op.
  validation {
    condition = (var.service_layout == "steps"
      ? alltrue([for name in ["ingest", "model_step", "tool_step", "dead_letter"] : var.min_instances[name] == 0])
    : var.min_instances.steps == 0)
    error_message = "min_instances names a service this service_layout does not deploy: under \"steps\" one service serves every step kind (set min_instances = { steps = 1 }, and api if you like); under \"per_step\" there is no steps service (set ingest, model_step, tool_step, dead_letter or api)."
  }
}

locals {
  step_kinds = ["ingest", "model_step", "tool_step", "dead_letter"]

  # The services deployed, by FUNCTION_TARGET (also the key of every per-service resource:
  # "per_step" keeps the addresses a service per kind has always had).
  services = var.service_layout == "steps" ? {
    steps = local.steps_service
    api   = local.per_step_services.api
  } : local.per_step_services

  # The service that serves each kind (the api serves itself).
  service_of = {
    for kind in keys(local.per_step_services) :
    kind => var.service_layout == "steps" && contains(local.step_kinds, kind) ? "steps" : kind
  }

  # Where each step kind's subscription pushes: its service's URL, followed on the steps
  # service by the path that names the kind (ackloop.hosting.function_app.combined_app).
  push_targets = {
    for kind in local.step_kinds : kind => {
      service = local.service_of[kind]
      path    = var.service_layout == "steps" ? "/${kind}" : ""
    }
  }
}
