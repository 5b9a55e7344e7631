"""Model providers: pick the adapter for a model config, reusing SDK clients across steps.

The SDKs are imported lazily so that `chatd.providers.base` (used by workflow code, which runs
in Temporal's sandbox) does not pull in the anthropic/openai packages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from chatd.models import ModelConfig, ModelError
from chatd.providers.base import ModelProvider, ProviderError
from chatd.settings import ProviderSettings
from chatd.tls import client_context

if TYPE_CHECKING:
    from typing import TypeAlias

    import anthropic
    import openai
    from google import genai

    _SdkClient: TypeAlias = (
        anthropic.AsyncAnthropic
        | anthropic.AsyncAnthropicBedrock
        | anthropic.AsyncAnthropicVertex
        | openai.AsyncOpenAI
    )

__all__ = [
    "DEMO_API_KEY",
    "close_clients",
    "google_context_window",
    "import_sdks",
    "make_provider",
]

DEMO_API_KEY = "demo"
"""The placeholder key sent to the fake provider behind the `demo` model."""

# Clients own connection pools; one per (sdk, base_url, key) lets every step reuse them.
_clients: dict[tuple[str, str | None, str], _SdkClient] = {}
_google_clients: dict[tuple[str | None, str], genai.Client] = {}
_Client = TypeVar("_Client", bound="_SdkClient")


def make_provider(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    """The adapter for `config`, on a cached client; raises `ProviderError` (kind `config`)."""
    build = _BUILDERS.get(config.provider)
    if build is None:
        raise ProviderError(_config_error(f"unknown provider {config.provider!r}", config))
    return build(config, settings)


def _anthropic(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    key = _require(settings.anthropic_api_key, "ANTHROPIC_API_KEY is not set", config)
    from chatd.providers.anthropic import AnthropicProvider

    return AnthropicProvider(_anthropic_client(settings.anthropic_base_url, key))


def _demo(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    url = _require(settings.demo_base_url, "CHATD_DEMO_BASE_URL is not set", config)
    from chatd.providers.anthropic import AnthropicProvider

    return AnthropicProvider(_anthropic_client(url, DEMO_API_KEY), provider_name="demo")


def _openai(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    key = _require(settings.openai_api_key, "OPENAI_API_KEY is not set", config)
    return _openai_provider(config, _openai_client(settings.openai_base_url, key))


def _google(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    if not settings.google_configured:
        message = "GEMINI_API_KEY (or GOOGLE_GENAI_USE_VERTEXAI) is not set"
        raise ProviderError(_config_error(message, config))
    from chatd.providers.google import GoogleProvider

    return GoogleProvider(_google_client(settings))


def _bedrock(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    region = _require(settings.bedrock_region, "AWS_REGION is not set", config)
    import anthropic

    from chatd.providers.anthropic import AnthropicProvider

    client = _cached(
        ("anthropic-bedrock", settings.bedrock_base_url, region),
        anthropic.AsyncAnthropicBedrock,
        lambda: anthropic.AsyncAnthropicBedrock(
            aws_region=region,
            api_key=settings.bedrock_api_key,
            base_url=settings.bedrock_base_url,
            max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=client_context()),
        ),
    )
    return AnthropicProvider(client, provider_name=config.provider)


def _anthropic_vertex(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    region = _require(settings.vertex_region, "CLOUD_ML_REGION is not set", config)
    project = _require(settings.vertex_project, "ANTHROPIC_VERTEX_PROJECT_ID is not set", config)
    import anthropic

    from chatd.providers.anthropic import AnthropicProvider

    client = _cached(
        ("anthropic-vertex", settings.vertex_base_url, f"{project}/{region}"),
        anthropic.AsyncAnthropicVertex,
        lambda: anthropic.AsyncAnthropicVertex(
            region=region,
            project_id=project,
            access_token=settings.vertex_access_token,
            base_url=settings.vertex_base_url,
            max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=client_context()),
        ),
    )
    return AnthropicProvider(client, provider_name=config.provider)


def _azure_openai(config: ModelConfig, settings: ProviderSettings) -> ModelProvider:
    endpoint = _require(settings.azure_endpoint, "AZURE_OPENAI_ENDPOINT is not set", config)
    credential = settings.azure_api_key or settings.azure_ad_token
    _require(credential, "AZURE_OPENAI_API_KEY (or AZURE_OPENAI_AD_TOKEN) is not set", config)
    import openai

    client = _cached(
        ("azure-openai", endpoint, str(credential)),
        openai.AsyncAzureOpenAI,
        lambda: openai.AsyncAzureOpenAI(
            azure_endpoint=endpoint,
            api_version=settings.azure_api_version,
            api_key=settings.azure_api_key,
            azure_ad_token=None if settings.azure_api_key else settings.azure_ad_token,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(verify=client_context()),
        ),
    )
    return _openai_provider(config, client)


_BUILDERS: dict[str, Callable[[ModelConfig, ProviderSettings], ModelProvider]] = {
    "anthropic": _anthropic,
    "openai": _openai,
    "google": _google,
    "anthropic-bedrock": _bedrock,
    "anthropic-vertex": _anthropic_vertex,
    "azure-openai": _azure_openai,
    "demo": _demo,
}


async def google_context_window(name: str, settings: ProviderSettings) -> int | None:
    """The input window Gemini reports for model `name` (`models.get`); raises the SDK's
    errors."""
    model = await _google_client(settings).aio.models.get(model=name)
    return model.input_token_limit


def import_sdks(settings: ProviderSettings) -> None:
    """Import the SDKs and adapters of the configured providers now, rather than on the
    first model call (an import blocks the worker's event loop for a second or more).

    A worker does this at startup, so the SDKs' ~4,000 modules are among the objects it
    freezes out of the garbage collector (see `chatd.heap`). A provider with no settings
    fails its chats' steps before importing anything.
    """
    claude = (
        settings.anthropic_api_key,
        settings.demo_base_url,
        settings.bedrock_region,
        settings.vertex_region,
    )
    if any(claude):
        import chatd.providers.anthropic
    if settings.openai_api_key or settings.azure_endpoint:
        import chatd.providers.openai_chat
        import chatd.providers.openai_responses
    if settings.google_configured:
        import chatd.providers.google  # noqa: F401


async def close_clients() -> None:
    """Close every cached SDK client (worker shutdown, tests); later calls make new ones."""
    clients = list(_clients.values())
    _clients.clear()
    for client in clients:
        await client.close()
    google_clients = list(_google_clients.values())
    _google_clients.clear()
    for google_client in google_clients:
        await google_client.aio.aclose()  # its async side holds the pool


def _openai_provider(config: ModelConfig, client: openai.AsyncOpenAI) -> ModelProvider:
    from chatd.providers.openai_chat import OpenAIChatProvider
    from chatd.providers.openai_responses import OpenAIResponsesProvider

    if config.openai_api == "responses":
        return OpenAIResponsesProvider(client, provider_name=config.provider)
    return OpenAIChatProvider(client, provider_name=config.provider)


def _require(value: str | None, message: str, config: ModelConfig) -> str:
    if not value:
        raise ProviderError(_config_error(message, config))
    return value


def _config_error(message: str, config: ModelConfig) -> ModelError:
    return ModelError(message=message, kind="config", provider=config.provider, retryable=False)


def _cached(
    key: tuple[str, str | None, str], sdk: type[_Client], make: Callable[[], _Client]
) -> _Client:
    """The client kept under `key`, made on first use (an `sdk` instance)."""
    client = _clients.get(key)
    if not isinstance(client, sdk):
        client = make()
        _clients[key] = client
    return client


def _anthropic_client(base_url: str | None, api_key: str) -> anthropic.AsyncAnthropic:
    import anthropic

    return _cached(
        ("anthropic", base_url, api_key),
        anthropic.AsyncAnthropic,
        lambda: anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            http_client=anthropic.DefaultAsyncHttpxClient(verify=client_context()),
        ),
    )


def _openai_client(base_url: str | None, api_key: str) -> openai.AsyncOpenAI:
    import openai

    return _cached(
        ("openai", base_url, api_key),
        openai.AsyncOpenAI,
        lambda: openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            http_client=openai.DefaultAsyncHttpxClient(verify=client_context()),
        ),
    )


def _google_client(settings: ProviderSettings) -> genai.Client:
    from google import genai
    from google.genai import types

    from chatd.providers.google import API_VERSION

    where = settings.google_cloud_project if settings.google_vertex else None
    cache_key = (settings.google_base_url, settings.google_api_key or where or "")
    client = _google_clients.get(cache_key)
    if client is None:
        if settings.google_vertex:
            # Vertex AI's own API version; Google's default credentials unless a token is set.
            token = settings.vertex_access_token
            client = genai.Client(
                vertexai=True,
                project=settings.google_cloud_project,
                location=settings.google_cloud_location,
                credentials=_access_token_credentials(token) if token else None,
                http_options=types.HttpOptions(
                    base_url=settings.google_base_url,
                    async_client_args={"verify": client_context()},
                ),
            )
        else:
            options = types.HttpOptions(
                api_version=API_VERSION,
                base_url=settings.google_base_url,
                async_client_args={"verify": client_context()},
            )
            client = genai.Client(api_key=settings.google_api_key, http_options=options)
        _google_clients[cache_key] = client
    return client


def _access_token_credentials(token: str) -> Any:
    from google.oauth2.credentials import Credentials

    return Credentials(token=token)  # type: ignore[no-untyped-call]
