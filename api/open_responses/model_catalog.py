"""`GET /v1/models`: the models a client may name in a response's `model`, in OpenAI's shape.

The operator's aliases, the demo model, and a few current models of each provider the
gateway's environment has a key for. A provider's key is the workers' setting: a gateway
started without it (`chatd api` needs none) lists none of that provider's models, though
any `<provider>/<name>` may still be asked for.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from api.access import Owner
from api.errors import ApiError
from api.state import state_of
from chatd.context import KNOWN_CONTEXT_LIMITS, context_limit
from chatd.fake_provider.demo import DEMO_MODEL
from chatd.models import ModelConfig, ProviderName
from chatd.settings import ProviderSettings

__all__ = ["PROVIDER_MODELS", "ModelList", "ModelObject", "catalog", "model_object", "router"]

router = APIRouter(prefix="/v1", tags=["open-responses"])

PROVIDER_MODELS: dict[ProviderName, tuple[str, ...]] = {
    "anthropic": ("claude-sonnet-4-5", "claude-opus-4-1", "claude-haiku-4-5"),
    "openai": ("gpt-5", "gpt-5-mini", "gpt-4.1", "gpt-4o"),
    "google": ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite"),
}
"""Current models of each provider, listed when the gateway has the provider's key."""


class ModelObject(BaseModel):
    """A model, as OpenAI's API describes one; the last two fields are chatd's."""

    id: str
    """What a response's `model` names: `<provider>/<name>` or an alias."""
    object: str = "model"
    created: int = 0
    """Unix time the model was made: chatd doesn't know it, so 0."""
    owned_by: str
    """The provider that serves the model."""
    context_window: int | None = None
    """The tokens of context chatd fits a chat into for this model, where chatd knows it."""
    max_output_tokens: int | None = None
    """The output tokens of one model step, where the alias sets them."""


class ModelList(BaseModel):
    """Every model the deployment lists."""

    object: str = "list"
    data: list[ModelObject]


def catalog(aliases: dict[str, ModelConfig], providers: ProviderSettings) -> dict[str, ModelConfig]:
    """The listed models by id: the aliases first (a name resolves to its alias first)."""
    models = dict(aliases)
    models.setdefault(f"demo/{DEMO_MODEL}", ModelConfig(provider="demo", name=DEMO_MODEL))
    keys: dict[ProviderName, bool] = {
        "anthropic": bool(providers.anthropic_api_key),
        "openai": bool(providers.openai_api_key),
        "google": providers.google_configured,
    }
    for provider, names in PROVIDER_MODELS.items():
        if keys.get(provider):
            for name in names:
                models.setdefault(f"{provider}/{name}", ModelConfig(provider=provider, name=name))
    return models


def model_object(model_id: str, model: ModelConfig) -> ModelObject:
    """`model` as listed under `model_id`."""
    return ModelObject(
        id=model_id,
        owned_by=model.provider,
        context_window=_known_window(model),
        max_output_tokens=model.max_output_tokens,
    )


def _known_window(model: ModelConfig) -> int | None:
    """The window chatd sizes the model's context to, if the model's configuration or the
    known table sets it (a model neither knows gets a default that says nothing of it)."""
    if model.context_limit or any(model.name.startswith(p) for p in KNOWN_CONTEXT_LIMITS):
        return context_limit(model)
    return None


def _listed(request: Request) -> dict[str, ModelConfig]:
    # Read per request: a few environment lookups, and a test can set a key.
    return catalog(state_of(request).model_aliases, ProviderSettings.from_env())


@router.get("/models", response_model_exclude_none=True)
async def list_models(request: Request, owner: Owner) -> ModelList:
    """The models a response's `model` may name: the operator's aliases, the demo model,
    and current models of the providers the gateway has a key for. Any other
    `<provider>/<name>` may be asked for as well."""
    return ModelList(data=[model_object(i, m) for i, m in _listed(request).items()])


@router.get("/models/{model_id:path}", response_model_exclude_none=True)
async def retrieve_model(model_id: str, request: Request, owner: Owner) -> ModelObject:
    """One listed model (`GET /v1/models` lists them)."""
    model = _listed(request).get(model_id)
    if model is None:
        raise ApiError(
            404,
            "model_not_found",
            f"The model {model_id!r} does not exist or is not listed by this deployment.",
            {"param": "model"},
        )
    return model_object(model_id, model)
