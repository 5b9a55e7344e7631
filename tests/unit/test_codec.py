"""The payload codec (AES-256-GCM, key rotation) and the codec server's protocol and auth."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import httpx
import pytest
import yaml
from google.protobuf import json_format
from hypothesis import given
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DefaultFailureConverterWithEncodedAttributes

from chatd.codec import (
    ENCRYPTED_ENCODING,
    KEY_ID_METADATA,
    CodecKeyError,
    CodecKeys,
    EncryptionCodec,
    codec_from_env,
    new_key,
)
from chatd.codec_server import CodecServerConfig, codec_app
from chatd.temporal_client import data_converter

OLD, NEW = new_key(), new_key()
TOKEN = "codec-server-token-for-tests"
SECRET = b'{"text": "my card number is 4111 1111 1111 1111"}'


def _codec(spec: str) -> EncryptionCodec:
    return EncryptionCodec(CodecKeys.parse(spec))


def _plain(data: bytes = SECRET) -> Payload:
    return Payload(metadata={"encoding": b"json/plain"}, data=data)


async def test_a_payload_is_encrypted_under_the_first_key_and_decrypts_back() -> None:
    codec = _codec(f"k1:{OLD}")
    [sealed] = await codec.encode([_plain()])
    assert sealed.metadata["encoding"] == ENCRYPTED_ENCODING
    assert sealed.metadata[KEY_ID_METADATA] == b"k1"
    assert b"4111" not in sealed.SerializeToString()
    assert await codec.decode([sealed]) == [_plain()]


@given(st.binary(max_size=2048), st.dictionaries(st.text(max_size=8), st.binary(max_size=16)))
def test_any_payload_round_trips(data: bytes, metadata: dict[str, bytes]) -> None:
    codec = _codec(f"k1:{OLD}")
    payload = Payload(metadata=metadata, data=data)

    async def round_trip() -> list[Payload]:
        return await codec.decode(await codec.encode([payload]))

    assert asyncio.run(round_trip()) == [payload]


async def test_rotation_the_new_key_encrypts_and_the_old_one_still_decrypts() -> None:
    [before] = await _codec(f"old:{OLD}").encode([_plain()])
    rotated = _codec(f"new:{NEW},old:{OLD}")
    [after] = await rotated.encode([_plain()])
    assert after.metadata[KEY_ID_METADATA] == b"new"
    assert await rotated.decode([before, after]) == [_plain(), _plain()]


async def test_a_payload_of_a_key_no_longer_configured_is_refused() -> None:
    [sealed] = await _codec(f"old:{OLD}").encode([_plain()])
    with pytest.raises(CodecKeyError, match="no key 'old'"):
        await _codec(f"new:{NEW}").decode([sealed])


async def test_a_payload_relabelled_with_another_key_id_does_not_decrypt() -> None:
    """The key id is authenticated: swapping it is caught, not decrypted as garbage."""
    codec = _codec(f"a:{OLD},b:{OLD}")
    [sealed] = await codec.encode([_plain()])
    sealed.metadata[KEY_ID_METADATA] = b"b"
    with pytest.raises(CodecKeyError, match="does not decrypt"):
        await codec.decode([sealed])


async def test_a_payload_that_was_never_encrypted_passes_through() -> None:
    """A history from before the codec was on, or a CLI `--input`, stays readable."""
    assert await _codec(f"k1:{OLD}").decode([_plain()]) == [_plain()]


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("", "no key"),
        ("k1", "id:base64key"),
        (f":{OLD}", "id:base64key"),
        ("k1:not base64!", "not base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "has 5 bytes"),
        (f"k1:{OLD},k1:{NEW}", "appears twice"),
    ],
    # Stable ids: the keys are random, and parallel workers must collect the same tests.
    ids=["empty", "no-colon", "no-id", "not-base64", "short", "twice"],
)
def test_malformed_keys_are_refused_without_showing_a_key(spec: str, complaint: str) -> None:
    with pytest.raises(CodecKeyError, match=complaint) as refused:
        CodecKeys.parse(spec)
    assert OLD not in str(refused.value) and NEW not in str(refused.value)


def test_the_converter_encrypts_payloads_and_failure_messages_only_when_keys_are_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CHATD_CODEC_KEYS", raising=False)
    assert codec_from_env() is None
    assert data_converter() is pydantic_data_converter
    monkeypatch.setenv("CHATD_CODEC_KEYS", f"k1:{OLD}")
    converter = data_converter()
    assert isinstance(converter.payload_codec, EncryptionCodec)
    assert isinstance(converter.failure_converter, DefaultFailureConverterWithEncodedAttributes)
    assert converter.payload_converter_class is pydantic_data_converter.payload_converter_class


def _server(keys: str = f"k1:{OLD}") -> httpx.AsyncClient:
    config = CodecServerConfig(
        CodecKeys.parse(keys), TOKEN, cors_origins=("http://localhost:8233",)
    )
    transport = httpx.ASGITransport(app=codec_app(config))
    return httpx.AsyncClient(transport=transport, base_url="http://codec")


def _body(*payloads: Payload) -> str:
    return json_format.MessageToJson(Payloads(payloads=payloads))


def _payloads(response: httpx.Response) -> list[Payload]:
    return list(json_format.Parse(response.text, Payloads()).payloads)


async def test_the_codec_server_decodes_what_the_codec_encoded() -> None:
    [sealed] = await _codec(f"k1:{OLD}").encode([_plain()])
    async with _server() as server:
        decoded = await server.post(
            "/decode",
            content=_body(sealed),
            headers={"Authorization": f"Bearer {TOKEN}", "X-Namespace": "default"},
        )
        assert decoded.status_code == 200
        assert _payloads(decoded) == [_plain()]
        encoded = await server.post(
            "/encode", content=_body(_plain()), headers={"Authorization": f"Bearer {TOKEN}"}
        )
    [again] = _payloads(encoded)
    assert again.metadata[KEY_ID_METADATA] == b"k1"
    assert await _codec(f"k1:{OLD}").decode([again]) == [_plain()]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": TOKEN}],
    ids=["missing", "wrong", "not-bearer"],
)
@pytest.mark.parametrize("path", ["/decode", "/encode"])
async def test_the_codec_server_refuses_a_caller_without_the_token(
    path: str, headers: dict[str, str]
) -> None:
    [sealed] = await _codec(f"k1:{OLD}").encode([_plain()])
    async with _server() as server:
        refused = await server.post(path, content=_body(sealed), headers=headers)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "unauthorized"
    assert b"4111" not in refused.content


async def test_the_codec_server_answers_bad_input_with_a_400() -> None:
    [foreign] = await _codec(f"other:{NEW}").encode([_plain()])
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with _server() as server:
        garbled = await server.post("/decode", content=b"{not json", headers=auth)
        unknown_key = await server.post("/decode", content=_body(foreign), headers=auth)
    assert garbled.status_code == 400 and garbled.json()["error"]["code"] == "invalid_payloads"
    assert unknown_key.status_code == 400
    assert unknown_key.json()["error"]["code"] == "undecodable_payload"


async def test_the_ui_origin_gets_cors_headers_and_others_do_not() -> None:
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
    }
    async with _server() as server:
        ui = await server.options(
            "/decode", headers={"Origin": "http://localhost:8233", **preflight}
        )
        other = await server.options("/decode", headers={"Origin": "http://evil.test", **preflight})
    assert ui.status_code == 200
    assert ui.headers["access-control-allow-origin"] == "http://localhost:8233"
    assert "authorization" in ui.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"CHATD_CODEC_SERVER_TOKEN": TOKEN}, "CHATD_CODEC_KEYS"),
        ({"CHATD_CODEC_KEYS": f"k1:{OLD}"}, "CHATD_CODEC_SERVER_TOKEN"),
        ({"CHATD_CODEC_KEYS": f"k1:{OLD}", "CHATD_CODEC_SERVER_TOKEN": "short"}, "16"),
    ],
)
def test_the_codec_server_needs_keys_and_a_long_token(env: dict[str, str], complaint: str) -> None:
    with pytest.raises(CodecKeyError, match=complaint):
        CodecServerConfig.from_env(env)


def test_the_codec_server_reads_its_origins() -> None:
    env = {
        "CHATD_CODEC_KEYS": f"k1:{OLD}",
        "CHATD_CODEC_SERVER_TOKEN": TOKEN,
        "CHATD_CODEC_CORS_ORIGINS": "http://localhost:8233, https://temporal.example",
    }
    config = CodecServerConfig.from_env(env)
    assert config.cors_origins == ("http://localhost:8233", "https://temporal.example")
    assert config.token == TOKEN


def test_the_compose_deployment_encrypts_with_one_key_set_everywhere() -> None:
    """Worker and API must agree on the codec, and the codec server must hold their keys."""
    compose = Path(__file__).resolve().parents[2] / "docker-compose.yml"
    services = yaml.safe_load(compose.read_text())["services"]
    keys = {services[name]["environment"]["CHATD_CODEC_KEYS"] for name in ("worker", "api")}
    keys.add(services["codec-server"]["environment"]["CHATD_CODEC_KEYS"])
    assert len(keys) == 1 and keys.pop().startswith("${CHATD_CODEC_KEYS:?")
    assert services["codec-server"]["command"][:2] == ["chatd", "codec-server"]
    assert services["codec-server"]["ports"] == ["127.0.0.1:${CHATD_CODEC_SERVER_PORT:-8089}:8089"]
