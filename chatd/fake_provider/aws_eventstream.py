"""AWS's binary event-stream framing (`application/vnd.amazon.eventstream`), as Bedrock's
`invoke-with-response-stream` sends it: each Anthropic stream event is a `chunk` whose JSON
payload holds the event's bytes, base64-encoded; a failure mid-stream is an `exception`.

A message is its total and headers lengths and their CRC32, the headers (name, type 7 for a
string, value), the payload, and the CRC32 of all that came before.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from typing import Any

__all__ = ["CONTENT_TYPE", "chunk_message", "exception_message"]

CONTENT_TYPE = "application/vnd.amazon.eventstream"
_STRING = 7


def chunk_message(event: dict[str, Any]) -> bytes:
    """One Anthropic stream event as Bedrock's `chunk` event."""
    raw = json.dumps(event, separators=(",", ":")).encode()
    payload = json.dumps({"bytes": base64.b64encode(raw).decode()}).encode()
    headers = {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return _message(headers, payload)


def exception_message(exception_type: str, message: str) -> bytes:
    """A mid-stream failure (`throttlingException`, `serviceUnavailableException`, ...)."""
    headers = {
        ":exception-type": exception_type,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return _message(headers, json.dumps({"message": message}).encode())


def _message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(_header(name, value) for name, value in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return head + struct.pack(">I", zlib.crc32(head))


def _header(name: str, value: str) -> bytes:
    key, data = name.encode(), value.encode()
    return struct.pack(">B", len(key)) + key + struct.pack(">BH", _STRING, len(data)) + data
