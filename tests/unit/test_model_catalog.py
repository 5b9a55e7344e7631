"""The models `GET /v1/models` lists, and the model names a response may not name."""

from __future__ import annotations

import pytest

from api.errors import ApiError
from api.open_responses.model_catalog import PROVIDER_MODELS, catalog, model_object
from api.open_responses.model_names import ALIASES_ENV, model_aliases, resolve_model
from chatd.context import context_limit
from chatd.models import ModelConfig
from chatd.settings import ProviderSettings

NO_KEYS = ProviderSettings()


def test_without_keys_the_aliases_and_the_demo_model_are_listed() -> None:
    fast = ModelConfig(provider="anthropic", name="claude-haiku-4-5", max_output_tokens=512)
    assert list(catalog({"fast": fast}, NO_KEYS)) == ["fast", "demo/demo"]


def test_a_provider_s_models_are_listed_once_its_key_is_set() -> None:
    listed = catalog({}, ProviderSettings(openai_api_key="sk-test"))
    assert list(listed) == ["demo/demo", *(f"openai/{n}" for n in PROVIDER_MODELS["openai"])]
    both = catalog({}, ProviderSettings(openai_api_key="sk", anthropic_api_key="ak"))
    assert "anthropic/claude-sonnet-4-5" in both and "openai/gpt-5" in both


def test_an_alias_named_like_a_listed_model_is_listed_as_the_alias() -> None:
    """`resolve_model` looks a name up among the aliases first: the listing says the same."""
    mini = ModelConfig(provider="openai", name="gpt-5-mini")
    listed = catalog({"openai/gpt-5": mini}, ProviderSettings(openai_api_key="sk"))
    assert listed["openai/gpt-5"] is mini
    assert list(listed).count("openai/gpt-5") == 1


def test_a_model_shows_the_window_chatd_sizes_its_context_to() -> None:
    sonnet = ModelConfig(provider="anthropic", name="claude-sonnet-4-5")
    listed = model_object("anthropic/claude-sonnet-4-5", sonnet)
    assert listed.model_dump(exclude_none=True) == {
        "id": "anthropic/claude-sonnet-4-5",
        "object": "model",
        "created": 0,
        "owned_by": "anthropic",
        "context_window": context_limit(sonnet),
    }
    for provider, names in PROVIDER_MODELS.items():
        for name in names:
            config = ModelConfig(provider=provider, name=name)
            assert model_object(name, config).context_window == context_limit(config)


def test_an_alias_s_own_window_and_output_limit_are_shown() -> None:
    local = ModelConfig(
        provider="openai", name="qwen3", context_limit=32_768, max_output_tokens=4096
    )
    shown = model_object("local", local)
    assert (shown.context_window, shown.max_output_tokens, shown.owned_by) == (
        32_768,
        4096,
        "openai",
    )


def test_a_model_chatd_knows_no_window_of_shows_none() -> None:
    """The default window says nothing of the model, so it isn't claimed as the model's."""
    unknown = model_object("openai/my-finetune", ModelConfig(provider="openai", name="my-ft"))
    assert unknown.context_window is None and unknown.max_output_tokens is None


def test_the_demo_provider_serves_only_the_demo_model() -> None:
    assert resolve_model("demo/demo", {}) == ModelConfig(provider="demo", name="demo")
    for name in ("demo/p:r", "demo/claude-sonnet-4-5"):
        with pytest.raises(ApiError) as refused:
            resolve_model(name, {})
        assert (refused.value.status, refused.value.code) == (400, "model_not_found")
        assert refused.value.detail["param"] == "model"
        assert "demo/demo" in refused.value.message


def test_another_provider_s_name_is_left_to_the_workers() -> None:
    """Whether a worker has the provider's key the gateway can't know: the name is taken."""
    assert resolve_model("openai/gpt-5", {}).label == "openai/gpt-5"


def test_an_alias_to_another_demo_model_stops_the_gateway_s_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ALIASES_ENV, '{"play": "demo/other"}')
    with pytest.raises(ValueError, match="demo/demo"):
        model_aliases()
    monkeypatch.setenv(ALIASES_ENV, '{"play": {"provider": "demo", "name": "x"}}')
    with pytest.raises(ValueError, match="play"):
        model_aliases()
    monkeypatch.setenv(ALIASES_ENV, '{"play": "demo/demo"}')
    assert model_aliases() == {"play": ModelConfig(provider="demo", name="demo")}
