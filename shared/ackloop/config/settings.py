"""One settings model for every process, read from the environment once at start-up.

The environment variable names here are the contract with ``infra/`` (Terraform sets them) and
with ``ackloop dev up`` (which sets them for local processes). ``tests/test_infra.py`` checks
both directions.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ackloop.config.concurrency import ConcurrencyLimit
from ackloop.config.quotas import ModelQuota
from ackloop.config.spend import SpendLimit

ModelProvider = Literal["auto", "gemini", "scripted"]
ApiAuth = Literal["none", "bearer", "google_id_token", "cloud_run_iam"]
PushAuth = Literal["none", "oidc", "cloud_run_iam"]
TraceExport = Literal["auto", "cloud_trace", "file", "none"]


class Settings(BaseSettings):
    """Runtime configuration. Every field maps to ``ACKLOOP_<NAME>`` unless an alias says more."""

    model_config = SettingsConfigDict(env_prefix="ACKLOOP_", extra="ignore", frozen=True)

    project_id: str = Field(
        default="ackloop-local",
        validation_alias=AliasChoices("ACKLOOP_PROJECT_ID", "GOOGLE_CLOUD_PROJECT"),
        description="Google Cloud project that owns the topics and the Firestore database.",
    )
    firestore_database: str = Field(default="(default)", description="Firestore database id.")
    collection_prefix: str = Field(
        default="",
        pattern=r"^[a-z0-9_]*$",
        description="Prefix for top-level Firestore collections (lets tests share one database).",
    )

    queries_topic: str = Field(default="ackloop-queries", description="Topic users publish to.")
    model_steps_topic: str = Field(default="ackloop-model-steps", description="Model step topic.")
    tool_steps_topic: str = Field(default="ackloop-tool-steps", description="Tool step topic.")
    answers_topic: str = Field(default="ackloop-answers", description="Final answers topic.")
    dead_letter_topic: str = Field(default="ackloop-dead-letter", description="Dead-letter topic.")

    model_provider: ModelProvider = Field(
        default="auto",
        description="'gemini', 'scripted', or 'auto' (gemini when credentials exist).",
    )
    model: str = Field(default="gemini-3-flash-preview", description="Gemini model name.")
    gemini_api_key: SecretStr | None = Field(
        default=None,
        validation_alias=AliasChoices("ACKLOOP_GEMINI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY"),
        description="Gemini Developer API key (Vertex AI uses GOOGLE_GENAI_USE_VERTEXAI instead).",
    )
    use_vertexai: bool = Field(
        default=False,
        validation_alias=AliasChoices("ACKLOOP_USE_VERTEXAI", "GOOGLE_GENAI_USE_VERTEXAI"),
        description="Call Gemini through Vertex AI with the service account's credentials.",
    )
    vertex_location: str = Field(
        default="global",
        validation_alias=AliasChoices("ACKLOOP_VERTEX_LOCATION", "GOOGLE_CLOUD_LOCATION"),
        description="Vertex AI location for Gemini calls.",
    )
    gemini_base_url: str | None = Field(
        default=None, description="Override of the Gemini endpoint (a local compatible server)."
    )
    model_timeout_seconds: float = Field(default=60.0, gt=0, description="One model call.")
    model_stream: bool = Field(
        default=True,
        description="Stream Gemini's answer (generate_content_stream) and show its text on the "
        "run's event stream as 'delta' events while the call runs; the step still commits the "
        "one joined turn. Off: one unary call per model step, no delta written.",
    )
    stream_flush_seconds: float = Field(
        default=0.25, ge=0.05, le=10,
        description="Least time between two delta writes of one model call (the first piece "
        "is written at once, and the rest with the step): at most 1/stream_flush_seconds "
        "Firestore writes per second per run, plus one per model call.",
    )

    decode_cache_bytes: int = Field(
        default=16 * 1024 * 1024, ge=0,
        description="Memory a process may keep of the transcript chunks it decoded (each turn "
        "by its encoded bytes, and each chunk at the version it last read or wrote), so that a "
        "model step decodes only the turns it has not seen; least recently used first out. "
        "0: decode every read whole.",
    )

    tool_timeout_seconds: float = Field(default=30.0, gt=0, description="One tool call.")
    nws_base_url: str = Field(default="https://api.weather.gov", description="weather.gov API.")
    ip_echo_url: str = Field(default="https://icanhazip.com", description="Public-IP echo.")
    ipapi_base_url: str = Field(default="http://ip-api.com", description="IP geolocation API.")

    lease_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long a claimed step stays exclusive without a heartbeat (renewed every "
        "third of it). Bounds crash recovery: a delivery that finds a dead holder's lease waits "
        "it out inside the request, then takes the step over.",
    )
    max_step_attempts: int = Field(
        default=8, ge=1, description="Claims of one step before its run is failed."
    )
    request_timeout_seconds: float = Field(
        default=120.0,
        ge=10,
        le=3600,
        description="This service's request timeout (for a push service also the subscription's "
        "ack deadline): every wait inside a request ends in time to answer before it.",
    )
    step_claims: Literal["auto", "always"] = Field(
        default="auto",
        description="auto: a step claims its document before its call only where a duplicate "
        "call would cost more than the claim's write (a long prompt, a tool that is not "
        "retry-safe, a call that waits); always: every step claims (ackloop.engine.claims).",
    )
    claim_wait_seconds: float = Field(
        default=25.0,
        ge=0,
        description="Longest a delivery waits inside its request for a step that another "
        "delivery holds, before it acknowledges (a live holder) or answers 503.",
    )
    model_quotas: list[ModelQuota] = Field(
        default_factory=list,
        description="The model quotas every process shares, as a JSON list of {model, "
        "location, rpm, tpm, mode, headroom, shards} (ackloop.config.quotas): a model step "
        "reserves its call's place under its model's quota before it calls, and one that has "
        "to wait for it is acknowledged and woken at its place. Empty (the default): no "
        "limiter; a 429 is retried as any retryable error.",
    )
    concurrency_limits: list[ConcurrencyLimit] = Field(
        default_factory=list,
        description="Concurrency limits every process shares, as a JSON list of {steps: "
        "model|tool|all, key: owner|agent|tenant|deployment, limit} (ackloop.config."
        "concurrency): at most limit such steps at once per key; a step that finds no free "
        "slot waits in line, acknowledged, and is woken when one frees. Empty (the default): "
        "none.",
    )
    spend_limits: list[SpendLimit] = Field(
        default_factory=list,
        description="Dollar budgets per key and period, as a JSON list of {key: owner|agent|"
        "tenant|deployment, period: hour|day, usd, over: wait|fail} (ackloop.config.spend): "
        "checked before each paid model call; one that would go over waits for the next "
        "period, acknowledged, or fails its run, as configured. Empty (the default): none.",
    )
    limits_refresh_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How often a process reads the limits an operator set while the "
        "deployment runs (`ackloop limits set`, PUT /limits; ackloop.engine.live_limits): a "
        "change reaches every process within this time, at one read per process per period. "
        "0: never read them; the declared limits alone hold.",
    )
    retry_wait_seconds: float = Field(
        default=20.0,
        ge=0,
        description="Longest a model step waits inside its request for a model's retry-after; "
        "a longer one releases the step and is left to Pub/Sub's redelivery.",
    )
    sweep_stale_seconds: float = Field(
        default=180.0,
        gt=0,
        description="A running run with no progress for this long is resumed (or failed with a "
        "cause) by the sweeper.",
    )
    approval_timeout_seconds: float = Field(
        default=604_800.0, gt=0, le=2_592_000,
        description="Longest a tool call waits for a person's approval when neither its tool "
        "nor its run says: past it, the sweeper rejects the call. No wait lasts longer than "
        "retention_days, whatever its tool or run says.",
    )
    max_agent_depth: int = Field(
        default=3, ge=1, le=16,
        description="How deep sub-agents may nest (Agent.as_tool): a call that would start a "
        "child run deeper than this is refused with an error the model reads.",
    )
    default_max_steps: int = Field(default=20, ge=1, description="Model steps per run.")
    default_max_seconds: float = Field(default=300.0, gt=0, description="Wall clock per run.")
    default_max_tool_calls: int = Field(default=50, ge=0, description="Tool calls per run.")
    default_max_tokens: int | None = Field(default=None, ge=1, description="Tokens per run.")

    api_auth: ApiAuth = Field(
        default="none",
        description="HTTP API authentication in the app: 'none' (local only: every caller is "
        "'anonymous', sees every run and is an operator; warned about at start-up), 'bearer' (a "
        "shared token from api_bearer_token_file), 'google_id_token' (a token the app "
        "verifies) or 'cloud_run_iam' (the deployment's default: the token Cloud Run IAM "
        "verified in front names each caller, and must name one of api_id_token_emails when "
        "that is set).",
    )
    api_bearer_token_file: str | None = Field(
        default=None,
        description="File holding the bearer token (a Secret Manager secret mounted as a file).",
    )
    api_id_token_audience: str | None = Field(
        default=None, description="Audience a Google-signed ID token must carry (the API's URL)."
    )
    api_id_token_emails: str | None = Field(
        default=None,
        description="Comma-separated emails allowed to call with an ID token (google_id_token: "
        "unset means any; cloud_run_iam: required).",
    )
    api_sweeper_email: str | None = Field(
        default=None,
        description="Service account (the scheduled sweeper) whose token may POST /sweep, checked "
        "as api_auth checks every token: the token Cloud Run IAM checked under cloud_run_iam; "
        "a Google-signed ID token for api_id_token_audience (then required) under bearer and "
        "google_id_token.",
    )
    api_operators: str | None = Field(
        default=None,
        description="Comma-separated callers (as the API names them: 'bearer', "
        "'google:<subject>') who may read every dead letter and poison record and re-drive dead "
        "letters. With api_auth 'none' the anonymous caller is one.",
    )
    api_query_timeout_seconds: float = Field(
        default=50.0, gt=0, description="How long a synchronous query waits for its run."
    )
    api_docs: bool = Field(
        default=False,
        description="Serve the interactive API pages /docs and /redoc. Their HTML loads Swagger "
        "UI's and ReDoc's scripts from a CDN, on the same origin as the run inspector, so they "
        "are off unless asked for (locally); /openapi.json is always served.",
    )
    api_max_body_bytes: int = Field(
        default=262_144, ge=1024, description="Largest request body the HTTP API accepts."
    )
    api_stream_poll_seconds: float = Field(
        default=0.5, gt=0, description="How often a stream reads the run's documents."
    )
    api_stream_max_seconds: float = Field(
        default=300.0, gt=0, description="Longest one stream stays open (resume with its cursor)."
    )
    api_stream_max_open: int = Field(
        default=200, ge=1,
        description="Event streams one API process keeps open at once; beyond it a new stream "
        "is answered 503 with Retry-After.",
    )
    api_stream_send_timeout_seconds: float = Field(
        default=30.0, gt=0,
        description="Longest a stream waits for a client that does not read what it was sent; "
        "then the connection is closed.",
    )
    api_stream_page_size: int = Field(
        default=20, ge=1, le=500,
        description="Step documents a stream reads per query (it reads only past its cursor).",
    )
    api_max_connections: int = Field(
        default=1000, ge=1,
        description="Connections and tasks the API's server serves at once (uvicorn "
        "limit_concurrency); beyond it a request is answered 503.",
    )
    api_keep_alive_seconds: float = Field(
        default=5.0, gt=0, description="How long an idle keep-alive connection stays open."
    )
    api_files_concurrency: int = Field(
        default=2, ge=1,
        description="Requests to the routes that take a query's files, with a body over "
        "api_max_body_bytes, one process reads and handles at once (each holds about 100 MiB "
        "for 14 MiB of files); another waits api_files_wait_seconds, its body unread, then is "
        "answered 503 with Retry-After. Smaller requests never wait.",
    )
    api_files_wait_seconds: float = Field(
        default=10.0, gt=0,
        description="How long a large request waits for an api_files_concurrency slot.",
    )
    api_request_read_seconds: float = Field(
        default=30.0, gt=0,
        description="Longest a client may take to send a request's body (from its headers); a "
        "slower one is answered 408 and its connection closed.",
    )
    agents: str | None = Field(
        default=None,
        description="The agent catalog, as 'package.module:attribute': a list of Agent, or a "
        "function returning one (taking the Settings and/or an httpx.AsyncClient). Unset: the "
        "catalog an installed package declares in the 'ackloop.agents' entry point group, else "
        "the built-in agents.",
    )
    max_steps_ceiling: int = Field(
        default=100, ge=1, le=1000,
        description="Most model steps a caller may ask for per run (options.max_steps).",
    )
    max_seconds_ceiling: float = Field(
        default=3600.0, gt=0, le=86_400,
        description="Longest wall clock a caller may ask for per run (options.max_seconds).",
    )
    max_tool_calls_ceiling: int = Field(
        default=200, ge=0, le=10_000,
        description="Most tool calls a caller may ask for per run (options.max_tool_calls).",
    )
    push_auth: PushAuth = Field(
        default="none",
        description="Step push endpoints: 'cloud_run_iam' checks the claims of the push token "
        "Cloud Run IAM verified in front (email, audience, issuer, expiry; Cloud Run removed its "
        "signature), 'oidc' verifies the token's Google signature itself (only where no Cloud "
        "Run IAM strips it), 'none' checks nothing (local).",
    )
    push_auth_audience: str | None = Field(
        default=None,
        description="Audience push tokens must carry (the subscription's oidc_token audience); "
        "required unless push_auth is 'none'.",
    )
    push_auth_email: str | None = Field(
        default=None,
        description="Service account push tokens must name (the subscription's push identity); "
        "required unless push_auth is 'none'.",
    )

    retention_days: int = Field(
        default=30, ge=0, le=36_500,
        description="Days Firestore keeps a run's documents after it ended, a conversation and "
        "its transcript after its last run, and poison and dead letters after they were "
        "recorded (an expire_at timestamp that the TTL policies of infra/ delete by). 0 keeps "
        "everything: no expire_at is written.",
    )

    wake_queue: str | None = Field(
        default=None, pattern=r"^projects/[^/]+/locations/[^/]+/queues/[^/]+$",
        description="The Cloud Tasks queue (projects/P/locations/L/queues/Q) that publishes, "
        "at its time, the message of a call that sleeps (and a schedule's next firing). Unset: "
        "the sweeper finds what is due, at its period. ACKLOOP_TASKS_EMULATOR_HOST points it "
        "at the local stack's task queue.",
    )
    wake_identity: str | None = Field(
        default=None,
        description="The service account a wake's publish is made as (its OAuth token; it "
        "needs roles/pubsub.publisher on the topics woken). Unset with a wake_queue: the "
        "queue's tasks carry no token (only the local task queue accepts that).",
    )
    tasks_emulator_host: str | None = Field(
        default=None,
        description="host:port of a local Cloud Tasks stand-in (the local stack's task "
        "queue): wakes are armed there, without credentials, and publish to the Pub/Sub "
        "emulator.",
    )

    files_bucket: str | None = Field(
        default=None,
        description="Cloud Storage bucket the bytes of a query's files (and tools' output "
        "files) are kept in, under files/<sha256>-<size>; the transcript names them. Unset: "
        "they are kept in the process's memory, which only a single process (tests, the "
        "in-process engine) can use. STORAGE_EMULATOR_HOST points the client at an emulator.",
    )
    files_max_file_bytes: int = Field(
        default=7 * 1024 * 1024, ge=1,
        description="Largest file a query may carry inline (decoded bytes); larger is refused "
        "(HTTP 413). Pass a larger file as a gs:// or https:// URI instead.",
    )
    files_max_query_bytes: int = Field(
        default=14 * 1024 * 1024, ge=1,
        description="Most bytes a query's inline files may take together (decoded).",
    )
    files_max_count: int = Field(
        default=10, ge=0, le=100,
        description="Most files (inline and URIs) one query may carry.",
    )
    files_allowed_uris: str = Field(
        default="",
        description="Comma-separated gs://bucket[/prefix] and https://host[/prefix] prefixes "
        "a query's file URIs may lie under (matched on a path boundary); any other URI is "
        "refused (HTTP 422, poison reason file_uri_not_allowed). Empty (the default): a query "
        "takes files inline only. Gemini on Vertex AI reads a gs:// URI as the service "
        "identity, so list only what every caller may read. The files bucket is refused "
        "whatever is listed (only the engine writes there).",
    )
    files_inline_concurrency: int = Field(
        default=2, ge=1,
        description="Model requests inlining more than 1 MiB of files one process builds and "
        "sends at once (each holds about 70 MiB for a 14 MiB query); another waits "
        "files_inline_wait_seconds for a slot, then its step is retried later (Pub/Sub "
        "redelivers it).",
    )
    files_inline_wait_seconds: float = Field(
        default=5.0, gt=0,
        description="How long a model step waits for a files_inline_concurrency slot; keep "
        "it under lease_seconds.",
    )
    files_inline_bytes: int = Field(
        default=7 * 1024 * 1024, ge=0,
        description="A stored file at most this large is sent to Gemini inline (its bytes in "
        "the request); a larger one as a file_data part naming its gs:// URI, which Vertex AI "
        "reads (the Gemini Developer API does not). Gemini takes at most 20 MB inline per "
        "request; ackloop inlines at most 14 MiB of files per request, the newest first.",
    )

    log_level: str = Field(default="INFO", description="Python log level.")

    service_vcpu: float = Field(
        default=1.0, gt=0,
        description="vCPUs of this service's instances (infra/run.tf): what a request's time "
        "costs in the cost ledger.",
    )
    service_memory_gib: float = Field(
        default=0.5, gt=0,
        description="Memory of this service's instances in GiB (infra/run.tf sets each "
        "service's): what a request's time costs in the cost ledger.",
    )
    trace_export: TraceExport = Field(
        default="auto",
        description="Where spans go: 'cloud_trace', 'file' (JSON lines in trace_dir), 'none', or "
        "'auto': Cloud Trace on Cloud Run (K_SERVICE set), else files when trace_dir is set, "
        "else none.",
    )
    trace_dir: str | None = Field(
        default=None,
        description="Directory of the trace files (the local stack sets <stack>/traces): each "
        "process appends its spans to <service>-<pid>.jsonl.",
    )

    @model_validator(mode="after")
    def _push_auth_is_complete(self) -> Settings:
        """A push check without its email would pass a token of any service account, and one
        without its audience a token minted for any service: refuse the configuration."""
        if self.push_auth != "none":
            missing = [name for name, value in (("ACKLOOP_PUSH_AUTH_EMAIL", self.push_auth_email),
                                                ("ACKLOOP_PUSH_AUTH_AUDIENCE",
                                                 self.push_auth_audience)) if not value]
            if missing:
                raise ValueError(
                    f"ACKLOOP_PUSH_AUTH={self.push_auth} needs {' and '.join(missing)}: without "
                    "them a token of any service account, or for any service, would pass")
        return self

    @model_validator(mode="after")
    def _allowed_uris_are_prefixes(self) -> Settings:
        from ackloop.config.file_uris import parse_allowed

        parse_allowed(self.files_allowed_uris)  # a malformed entry stops the start-up
        return self

    @model_validator(mode="after")
    def _trace_files_have_a_directory(self) -> Settings:
        if self.trace_export == "file" and not self.trace_dir:
            raise ValueError("ACKLOOP_TRACE_EXPORT=file needs ACKLOOP_TRACE_DIR, the directory "
                             "the trace files are written to")
        return self

    def resolved_model_provider(self) -> Literal["gemini", "scripted"]:
        """'auto' means Gemini when an API key or Vertex AI is configured, else scripted."""
        if self.model_provider != "auto":
            return self.model_provider
        if self.gemini_api_key is not None or self.use_vertexai:
            return "gemini"
        return "scripted"

    def over_ceiling(
        self, max_steps: int | None, max_seconds: float | None, max_tool_calls: int | None
    ) -> str | None:
        """Why budgets a caller asked for exceed this deployment's ceilings (None if they don't)."""
        over = [
            f"{name} {value:g} is above this deployment's ceiling of {ceiling:g}"
            for name, value, ceiling in (
                ("max_steps", max_steps, self.max_steps_ceiling),
                ("max_seconds", max_seconds, self.max_seconds_ceiling),
                ("max_tool_calls", max_tool_calls, self.max_tool_calls_ceiling),
            )
            if value is not None and value > ceiling
        ]
        return "; ".join(over) or None

    def collection(self, name: str) -> str:
        """Name of a top-level Firestore collection, with the configured prefix."""
        return f"{self.collection_prefix}{name}"
