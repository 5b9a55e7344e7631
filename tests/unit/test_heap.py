"""The long-running processes keep their startup heap out of the garbage collector's walks."""

from __future__ import annotations

import json
import subprocess
import sys

_PROBE = """
import gc, json, sys
from chatd.heap import YOUNG_THRESHOLD, freeze_startup_objects
from chatd.providers import import_sdks
from chatd.settings import ProviderSettings
import_sdks(ProviderSettings(anthropic_api_key="k", openai_api_key="k"))
freeze_startup_objects()
print(json.dumps({
    "frozen": gc.get_freeze_count(),
    "tracked": len(gc.get_objects()),
    "threshold": gc.get_threshold(),
    "young": YOUNG_THRESHOLD,
    "sdks": "anthropic" in sys.modules and "openai" in sys.modules,
    "unconfigured": "google.genai" in sys.modules,
}))
"""


def test_startup_objects_are_frozen_with_the_sdks_and_young_collections_are_rarer() -> None:
    # A fresh interpreter: freezing is process-wide and must not touch the test process.
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    probe = json.loads(out)
    assert probe["sdks"], "the provider SDKs are imported before the freeze"
    assert not probe["unconfigured"], "an SDK no provider setting asks for stays unimported"
    assert probe["frozen"] > 100_000, "the SDKs' objects are among the frozen ones"
    assert probe["tracked"] < probe["frozen"] // 10, "little is left for a full collection"
    assert probe["threshold"][0] == probe["young"] > 700
