"""`memoryd tenants add|list|revoke`: per-tenant NATS credentials and the server config.

Credentials are made here and shown once; the registry keeps only bcrypt hashes. Every change
rewrites the server config (``<auth dir>/auth.conf``) and asks a running nats-server to reload
it, which also closes the connections of a revoked tenant.
"""

from __future__ import annotations

from pathlib import Path

from memoryd.shared.adapters import nats_auth
from memoryd.shared.adapters.embedded_nats import PID_FILE
from memoryd.shared.adapters.nats_auth import Registry, Streams
from memoryd.shared.settings import Settings


def _streams(settings: Settings) -> Streams:
    return Streams(
        events=settings.stream_name,
        notifications=settings.notify_stream_name,
        partitions=settings.partitions,
    )


def _with_service(registry: Registry, auth_dir: Path, lines: list[str]) -> Registry:
    """Make the workers' service user the first time; its credentials go to a private file."""
    if registry.service is not None:
        return registry
    password = nats_auth.new_password()
    env = nats_auth.write_service_env(auth_dir, password)
    lines.append(f"# the workers' credentials (service user) were written to {env}")
    return nats_auth.with_service(registry, password, nats_auth.now_utc())


def _saved(settings: Settings, registry: Registry, pid_file: Path | None, lines: list[str]) -> None:
    auth_dir = settings.resolved_auth_dir()
    config = nats_auth.save(auth_dir, registry, _streams(settings))
    pid_file = pid_file or settings.data_dir / "nats" / PID_FILE
    pid = nats_auth.reload_server(pid_file)
    if pid is not None:
        lines.append(f"# server config {config} written; nats-server (pid {pid}) reloaded it")
    else:
        lines.append(
            f"# server config {config} written; no running nats-server found at {pid_file}: "
            f"start one with --config {config} (memoryd's embedded one: "
            f"MEMORYD_EMBEDDED_NATS_CONFIG={config})"
        )


def add(settings: Settings, tenant: str, pid_file: Path | None = None) -> str:
    """Make a tenant's credentials; return them (shown once) and what was written."""
    auth_dir = settings.resolved_auth_dir()
    lines: list[str] = []
    registry = _with_service(nats_auth.load_registry(auth_dir), auth_dir, lines)
    password = nats_auth.new_password()
    registry = nats_auth.added(registry, tenant, password, nats_auth.now_utc())
    _saved(settings, registry, pid_file, lines)
    credentials = [
        f"# tenant {tenant}: its apps connect with these settings (shown once, not stored)",
        f"MEMORYD_NATS_USER={nats_auth.tenant_user(tenant)}",
        f"MEMORYD_NATS_PASSWORD={password}",
        f"MEMORYD_NATS_TENANT={tenant}",
    ]
    return "\n".join(credentials + lines)


def revoke(settings: Settings, tenant: str, pid_file: Path | None = None) -> str:
    """Remove a tenant's credentials; a reloaded server cuts its connections off."""
    auth_dir = settings.resolved_auth_dir()
    registry = nats_auth.revoked(nats_auth.load_registry(auth_dir), tenant)
    lines = [f"# tenant {tenant} revoked"]
    _saved(settings, registry, pid_file, lines)
    return "\n".join(lines)


def listing(settings: Settings) -> str:
    """Return one line per tenant with credentials: name, NATS user, when it was added."""
    registry = nats_auth.load_registry(settings.resolved_auth_dir())
    if not registry.tenants:
        return "no tenants have credentials (the server config admits the service user only)"
    rows = sorted(registry.tenants.items())
    return "\n".join(f"{name}\t{c.user}\tadded {c.added_at}" for name, c in rows)
