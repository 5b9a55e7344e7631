"""Process settings read from the environment (secrets stay here, never in payloads)."""

from __future__ import annotations

import os
from datetime import timedelta

from pydantic import BaseModel, Field

__all__ = [
    "ProviderSettings",
    "ReconcilerSettings",
    "TemporalSettings",
    "console_enabled",
    "max_body_bytes",
    "max_file_bytes",
    "max_message_bytes",
    "retry_deadline_s",
    "temporal_ui_url",
    "titles_enabled",
    "worker_max_activities",
]

DEFAULT_TASK_QUEUE = "chatd"


def titles_enabled() -> bool:
    """CHATD_GENERATE_TITLES (default on): whether new chats are named by their model.

    Both the gateway (which asks a turn to name its chat) and the worker read it.
    """
    return os.environ.get("CHATD_GENERATE_TITLES", "1").lower() not in ("0", "false", "no")


def console_enabled() -> bool:
    """CHATD_CONSOLE (default off): whether the gateway serves the browser console at
    `/console` (`chatd dev` always does)."""
    return os.environ.get("CHATD_CONSOLE", "").lower() in ("1", "true", "yes")


def workflow_sandbox_enabled() -> bool:
    """CHATD_WORKFLOW_SANDBOX (default off): run workflow code in Temporal's sandbox.

    The sandbox re-imports a workflow's module for every run and compiles a statement for
    every activation and command payload, a large share of a busy worker's CPU
    (bench/README.md, concurrency.py). What it guards is the determinism of chatd's own
    workflow code, which the test suite runs sandboxed (`tests/conftest.py` turns it on):
    a deployed worker runs code that passed it.
    """
    return _flag(os.environ.get("CHATD_WORKFLOW_SANDBOX"))


def temporal_ui_url() -> str | None:
    """CHATD_TEMPORAL_UI_URL: the Temporal UI the console links a turn's workflow to."""
    return os.environ.get("CHATD_TEMPORAL_UI_URL") or None


AZURE_API_VERSION = "2025-04-01-preview"
"""The Azure OpenAI API version asked for unless `OPENAI_API_VERSION` says otherwise (one
that has the Responses API)."""


class ProviderSettings(BaseModel):
    """Provider credentials and endpoints of one worker process."""

    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    google_api_key: str | None = None
    """The Gemini Developer API's key (`GOOGLE_API_KEY`, else `GEMINI_API_KEY`)."""
    google_base_url: str | None = None
    google_vertex: bool = False
    """Gemini on Vertex AI (`GOOGLE_GENAI_USE_VERTEXAI`), with Google's application default
    credentials, `GOOGLE_CLOUD_PROJECT` and `GOOGLE_CLOUD_LOCATION`."""
    google_cloud_project: str | None = None
    google_cloud_location: str | None = None
    bedrock_region: str | None = None
    """Claude on AWS Bedrock (`anthropic-bedrock`): `AWS_REGION`; credentials as AWS's SDKs
    find them (`AWS_*`, a profile, an instance role), or a Bedrock API key."""
    bedrock_api_key: str | None = None
    bedrock_base_url: str | None = None
    vertex_region: str | None = None
    """Claude on Google Vertex AI (`anthropic-vertex`): `CLOUD_ML_REGION` and
    `ANTHROPIC_VERTEX_PROJECT_ID`, with Google's application default credentials."""
    vertex_project: str | None = None
    vertex_base_url: str | None = None
    vertex_access_token: str | None = None
    """A Google OAuth access token to use instead of the default credentials (Claude's and
    Gemini's on Vertex AI)."""
    azure_endpoint: str | None = None
    """OpenAI on Azure (`azure-openai`, the model's name a deployment's):
    `AZURE_OPENAI_ENDPOINT` with `AZURE_OPENAI_API_KEY` or an Entra token
    (`AZURE_OPENAI_AD_TOKEN`)."""
    azure_api_key: str | None = None
    azure_ad_token: str | None = None
    azure_api_version: str = AZURE_API_VERSION
    demo_base_url: str | None = None
    """Base URL of the fake provider that serves the built-in `demo` model."""

    @classmethod
    def from_env(cls) -> ProviderSettings:
        """Read `ANTHROPIC_*`, `OPENAI_*`, Google's (as `google-genai` names them) and
        `CHATD_DEMO_BASE_URL`."""
        env = os.environ
        vertex = _flag(env.get("GOOGLE_GENAI_USE_VERTEXAI"))
        gemini_url = env.get("GOOGLE_GEMINI_BASE_URL")
        return cls(
            anthropic_api_key=env.get("ANTHROPIC_API_KEY") or None,
            anthropic_base_url=env.get("ANTHROPIC_BASE_URL") or None,
            openai_api_key=env.get("OPENAI_API_KEY") or None,
            openai_base_url=env.get("OPENAI_BASE_URL") or None,
            google_api_key=env.get("GOOGLE_API_KEY") or env.get("GEMINI_API_KEY") or None,
            google_base_url=(vertex and env.get("GOOGLE_VERTEX_BASE_URL")) or gemini_url or None,
            google_vertex=vertex,
            google_cloud_project=env.get("GOOGLE_CLOUD_PROJECT") or None,
            google_cloud_location=env.get("GOOGLE_CLOUD_LOCATION") or None,
            bedrock_region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            bedrock_api_key=env.get("AWS_BEARER_TOKEN_BEDROCK") or None,
            bedrock_base_url=env.get("ANTHROPIC_BEDROCK_BASE_URL") or None,
            vertex_region=env.get("CLOUD_ML_REGION") or None,
            vertex_project=env.get("ANTHROPIC_VERTEX_PROJECT_ID") or None,
            vertex_base_url=env.get("ANTHROPIC_VERTEX_BASE_URL") or None,
            vertex_access_token=env.get("CHATD_VERTEX_ACCESS_TOKEN") or None,
            azure_endpoint=env.get("AZURE_OPENAI_ENDPOINT") or None,
            azure_api_key=env.get("AZURE_OPENAI_API_KEY") or None,
            azure_ad_token=env.get("AZURE_OPENAI_AD_TOKEN") or None,
            azure_api_version=env.get("OPENAI_API_VERSION") or AZURE_API_VERSION,
            demo_base_url=env.get("CHATD_DEMO_BASE_URL") or None,
        )

    @property
    def google_configured(self) -> bool:
        """Whether Gemini can be called: a key, or Vertex AI chosen."""
        return bool(self.google_api_key) or self.google_vertex


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


class TemporalSettings(BaseModel):
    """How to reach Temporal."""

    address: str = "localhost:7233"
    namespace: str = "default"
    task_queue: str = DEFAULT_TASK_QUEUE
    tls: bool = False
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    tls_ca_path: str | None = None
    api_key: str | None = None

    @classmethod
    def from_env(cls) -> TemporalSettings:
        """Read `TEMPORAL_ADDRESS`, `TEMPORAL_NAMESPACE`, `CHATD_TASK_QUEUE` and TLS settings."""
        env = os.environ
        cert = env.get("TEMPORAL_TLS_CERT") or None
        return cls(
            address=env.get("TEMPORAL_ADDRESS", "localhost:7233"),
            namespace=env.get("TEMPORAL_NAMESPACE", "default"),
            task_queue=env.get("CHATD_TASK_QUEUE", DEFAULT_TASK_QUEUE),
            tls=env.get("TEMPORAL_TLS", "").lower() in ("1", "true", "yes") or cert is not None,
            tls_cert_path=cert,
            tls_key_path=env.get("TEMPORAL_TLS_KEY") or None,
            tls_ca_path=env.get("TEMPORAL_TLS_CA") or None,
            api_key=env.get("TEMPORAL_API_KEY") or None,
        )


DEFAULT_RETRY_DEADLINE_S = 1800


def retry_deadline_s() -> int:
    """CHATD_RETRY_DEADLINE_S (default 30 min): how long a turn keeps retrying a failing
    dependency (the provider, a tool's backend) before it ends with kind `unavailable`."""
    value = os.environ.get("CHATD_RETRY_DEADLINE_S", "")
    return int(value) if value.isdigit() and int(value) > 0 else DEFAULT_RETRY_DEADLINE_S


DEFAULT_UNSTORED_KEEP = timedelta(minutes=10)


def unstored_keep() -> timedelta:
    """CHATD_UNSTORED_KEEP_SECONDS (default 10 min): how long the chat of a `store: false`
    response is kept, hidden, once the response is over. A client that sends its whole
    conversation again (Codex does on every call) then continues that chat, writing only
    what it added; past this, its next request copies the conversation into a new chat.
    0: deleted as soon as its turn has ended."""
    value = os.environ.get("CHATD_UNSTORED_KEEP_SECONDS", "")
    return timedelta(seconds=float(value)) if value else DEFAULT_UNSTORED_KEEP


class ReconcilerSettings(BaseModel):
    """How often a worker looks for chats whose turn no workflow runs, and how long a turn
    must have been quiet before it may be ended (docs/architecture.md,
    rule 8, defence in depth)."""

    interval: timedelta = Field(default=timedelta(seconds=30), gt=timedelta(0))
    grace: timedelta = Field(default=timedelta(seconds=60), gt=timedelta(0))
    """At least the gap between a gateway beginning a turn and its workflow starting."""
    batch: int = Field(default=100, gt=0)
    """Chats examined per sweep (one `describe` each); later sweeps carry on from there."""
    hand_over_after: timedelta = Field(default=timedelta(seconds=10), gt=timedelta(0))
    """How long a stored message may wait for its gateway's hand-over before a reconciler
    hands it over (looked for every half of it): past a burst's background hand-overs, well
    short of what a client would take for a lost message."""

    @classmethod
    def from_env(cls) -> ReconcilerSettings:
        """Read `CHATD_RECONCILE_INTERVAL_SECONDS`, `CHATD_RECONCILE_GRACE_SECONDS` and
        `CHATD_RECONCILE_HAND_OVER_SECONDS`."""
        defaults = cls()
        return cls(
            interval=_seconds("CHATD_RECONCILE_INTERVAL_SECONDS", defaults.interval),
            grace=_seconds("CHATD_RECONCILE_GRACE_SECONDS", defaults.grace),
            hand_over_after=_seconds("CHATD_RECONCILE_HAND_OVER_SECONDS", defaults.hand_over_after),
        )


def _seconds(name: str, default: timedelta) -> timedelta:
    value = os.environ.get(name)
    return timedelta(seconds=float(value)) if value else default


def _positive_int(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() and int(value) > 0 else default


def worker_max_activities() -> int:
    """CHATD_WORKER_MAX_ACTIVITIES (default 50): the activities (streaming steps, tool calls)
    one worker runs at once; more wait at the server. One event loop keeps about this many
    model streams alive on time; raise it for slow models, add workers for more."""
    return _positive_int("CHATD_WORKER_MAX_ACTIVITIES", 50)


def max_body_bytes() -> int:
    """CHATD_MAX_BODY_BYTES (default 1 MiB): the largest request body the gateway reads."""
    return _positive_int("CHATD_MAX_BODY_BYTES", 1024 * 1024)


def max_file_bytes() -> int:
    """CHATD_MAX_FILE_BYTES (default 512 KiB): the largest file a user message may carry,
    decoded (its base64 is a third larger)."""
    return _positive_int("CHATD_MAX_FILE_BYTES", 512 * 1024)


def max_message_bytes() -> int:
    """CHATD_MAX_MESSAGE_BYTES (default 700 KiB): the largest user message, its text
    (UTF-8) and decoded files together; at the default, its JSON fits the body limit."""
    return _positive_int("CHATD_MAX_MESSAGE_BYTES", 700 * 1024)
