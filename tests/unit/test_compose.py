"""docker-compose.yml runs every component, gated on healthy infrastructure (no Docker needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from memoryd.services.bootstrap import ALL_COMPONENTS
from memoryd.services.cli import _parser

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
INFRASTRUCTURE = ("nats-1", "nats-2", "nats-3", "postgres", "qdrant")


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    """Return the compose services, YAML anchors and merge keys resolved."""
    loaded: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE.read_text())["services"]
    return loaded


def memoryd_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Return the services built from the memoryd image (its entrypoint is `memoryd`)."""
    return {
        name: service
        for name, service in services.items()
        if service.get("build", {}).get("dockerfile") == "infra/Dockerfile"
    }


def test_every_component_has_its_own_service(services: dict[str, dict[str, Any]]) -> None:
    """Each component of `memoryd up --components` runs in a service of its own."""
    commands = [service["command"] for service in memoryd_services(services).values()]
    for component in ALL_COMPONENTS:
        assert ["up", "--components", component] in commands, component
    assert len(ALL_COMPONENTS) == len(commands)


def test_every_memoryd_command_parses(services: dict[str, dict[str, Any]]) -> None:
    """Each memoryd service's command is a `memoryd` subcommand with known components."""
    for name, service in memoryd_services(services).items():
        args = _parser().parse_args(service["command"])
        if args.command == "up":
            assert set(args.components.split(",")) <= set(ALL_COMPONENTS), name


def test_memoryd_waits_for_healthy_infrastructure(services: dict[str, dict[str, Any]]) -> None:
    """Each memoryd service starts only once NATS, PostgreSQL and Qdrant report healthy."""
    healthy = {name: {"condition": "service_healthy"} for name in INFRASTRUCTURE}
    for name, service in memoryd_services(services).items():
        assert healthy == service["depends_on"], name
    for name in INFRASTRUCTURE:
        assert services[name]["healthcheck"]["test"], name


def test_health_checks_probe_each_server(services: dict[str, dict[str, Any]]) -> None:
    """NATS is probed on /healthz, PostgreSQL with pg_isready, Qdrant on /readyz."""
    probes = {name: " ".join(services[name]["healthcheck"]["test"]) for name in INFRASTRUCTURE}
    for node in ("nats-1", "nats-2", "nats-3"):
        assert ":8222/healthz" in probes[node]
    assert "pg_isready" in probes["postgres"]
    assert "/readyz" in probes["qdrant"]


def test_apps_reach_nats_on_the_client_port(services: dict[str, dict[str, Any]]) -> None:
    """One NATS node publishes the client port 4222, where the SDK connects."""
    published = [port for node in INFRASTRUCTURE[:3] for port in services[node].get("ports", [])]
    assert ["4222:4222"] == published


def test_nats_config_serves_the_probed_ports() -> None:
    """infra/nats/cluster.conf opens the client and monitoring ports compose relies on."""
    config = (COMPOSE.parent / "infra" / "nats" / "cluster.conf").read_text().splitlines()
    assert {"port: 4222", "http: 8222"} <= {line.strip() for line in config}
