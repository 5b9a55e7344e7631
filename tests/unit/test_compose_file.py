"""docker-compose.yml is a valid Compose file that wires the production processes correctly.

No Docker engine here, so `docker compose config` can't run; the file is validated against
the Compose specification's JSON schema instead (the schema `docker compose` itself uses,
vendored by check-jsonschema), and its wiring is checked. tests/e2e/test_deployment_e2e.py
runs what it describes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
DOCKERFILE = COMPOSE.with_name("Dockerfile")
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


def _services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]
    return services


def test_compose_file_follows_the_compose_specification() -> None:
    result = subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_worker_and_api_start_after_the_schema_and_search_attributes_exist() -> None:
    services = _services()
    assert services["migrate"]["command"] == ["chatd", "migrate"]
    for name in ("worker", "api"):
        needs = services[name]["depends_on"]
        assert needs["migrate"]["condition"] == "service_completed_successfully"
        assert needs["temporal-admin-tools"]["condition"] == "service_completed_successfully"
        env = services[name]["environment"]
        assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
        assert env["DATABASE_URL"].startswith("postgresql://")
        assert "@postgresql:5432/" in env["DATABASE_URL"]
    assert services["worker"]["command"] == ["chatd", "worker"]
    assert services["api"]["command"][:2] == ["chatd", "api"]


CHATD_SERVICES = ("migrate", "worker", "api")


def test_chatd_runs_read_only_with_a_tmpfs_and_two_of_each_long_running_process() -> None:
    services = _services()
    for name in CHATD_SERVICES:
        assert services[name]["read_only"] is True, name
        assert services[name]["tmpfs"] == ["/tmp"], name
    for name in ("worker", "api"):
        assert services[name]["deploy"]["replicas"] == 2, name
    # One host port per gateway replica.
    assert services["api"]["ports"] == ["${CHATD_API_PORTS:-8080-8081}:8080"]


def test_workers_share_the_workspace_volume_at_their_workspace_root() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    worker = compose["services"]["worker"]
    root = worker["environment"]["CHATD_WORKSPACE_ROOT"]
    assert f"workspaces:{root}" in worker["volumes"]
    assert "workspaces" in compose["volumes"]
    # The image makes that directory the runtime user's, so the fresh named volume is too.
    dockerfile = DOCKERFILE.read_text()
    assert f"ENV CHATD_WORKSPACE_ROOT={root}" in dockerfile
    assert f"mkdir -p {root}" in dockerfile and f"chown 10001:10001 {root}" in dockerfile
    assert "USER 10001:10001" in dockerfile
