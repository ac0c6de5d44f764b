"""Tenants walled off by nats-server: the credentials `memoryd tenants` keeps, the config it writes.

One account, users with permissions. Every tenant is a user whose permissions name only its
own subjects: it publishes under ``memoryd.ev.<tenant>.>``, requests ``memoryd.rpc.<tenant>.>``,
subscribes to ``memoryd.notify.<tenant>.>`` and to its own reply inboxes
(``_INBOX_<tenant>.>``), and reaches JetStream only through the consumer-create subjects that
carry a filter under its own subjects. The workers and the query service run as one service
user with every permission. Why not accounts: the log is one stream, and an account per
tenant would need every stream and service imported into each of them; why not auth
callout: it needs a service answering every connection. The reasoning is in
docs/architecture.md ("Tenants").

Nothing here holds a password in clear: the registry keeps bcrypt hashes (nats-server checks
them itself); a password is shown once, when it is made.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import bcrypt

from memoryd.shared import subjects
from memoryd.shared.contracts.scope import SAFE_TOKEN_PATTERN

SERVICE_USER = "memoryd-service"
# nats-server's own `mkpasswd` cost: a connection's check takes ~0.1 s, a guess as long.
BCRYPT_ROUNDS = 11
REGISTRY_FILE = "tenants.json"
SERVER_CONFIG_FILE = "auth.conf"
SERVICE_ENV_FILE = "service.env"

_TOKEN = re.compile(SAFE_TOKEN_PATTERN)


class TenantError(ValueError):
    """A tenant name is not a subject token, or the tenant is (not) registered."""


@dataclass(frozen=True)
class Credential:
    """A NATS user: its name, the bcrypt hash of its password, when it was made."""

    user: str
    password_hash: str
    added_at: str


@dataclass(frozen=True)
class Registry:
    """The service user and every tenant's user (what the server config is written from)."""

    service: Credential | None = None
    tenants: Mapping[str, Credential] = field(default_factory=dict)


@dataclass(frozen=True)
class Streams:
    """The stream names tenant permissions refer to (the settings' names), and the log's
    partitions (which name the workers' consumers)."""

    events: str = "MEMORYD"
    notifications: str = "MEMORYD_NOTIFY"
    partitions: int = 1

    def worker_consumers(self) -> list[str]:
        """Return the durable names of the workers' consumers of the log."""
        return subjects.partition_consumers(subjects.LOG_CONSUMERS, self.partitions)


def tenant_user(tenant: str) -> str:
    """Return the NATS user name of a tenant's apps."""
    return f"tenant-{tenant}"


def new_password() -> str:
    """Return a fresh random password (192 bits, URL-safe)."""
    return secrets.token_urlsafe(24)


def hashed(password: str) -> str:
    """Return the bcrypt hash nats-server checks a password against."""
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()


def checked_tenant(tenant: str) -> str:
    """Return ``tenant`` if it can be a subject token (what scopes allow), else raise."""
    if not _TOKEN.match(tenant):
        raise TenantError(
            f"tenant {tenant!r} is not a valid name: 1-64 letters, digits, '-' or '_'"
        )
    return tenant


def tenant_permissions(tenant: str, streams: Streams) -> dict[str, Any]:
    """Return what a tenant's user may publish and subscribe to: its own subjects only.

    JetStream is reached through its API subjects, which name the stream and, on consumer
    creation, the consumer's filter: a tenant may create consumers filtered under its own
    events and notifications, and read, inspect and delete consumers of those streams. The
    workers' consumers are denied to it by name (it may not pull their messages, delete them
    or redefine them); their state (acknowledged sequences) stays readable, which is what
    ``wait_until_applied`` asks.
    """
    own_events = f"{subjects.EVENTS_PREFIX}.{tenant}.>"
    own_notifications = f"{subjects.NOTIFY_PREFIX}.{tenant}.>"
    api = "$JS.API.CONSUMER"
    events, notes = streams.events, streams.notifications
    allow = [
        own_events,
        f"{subjects.RPC_PREFIX}.{tenant}.>",
        f"{api}.CREATE.{events}.*.{own_events}",
        f"{api}.CREATE.{notes}.*.{own_notifications}",
        f"$JS.ACK.{notes}.>",
    ]
    # Notifications are delivered into the tenant's inbox (push): no pull on that stream.
    allow += [f"{api}.{op}.{events}.*" for op in ("MSG.NEXT", "INFO", "DELETE")]
    allow += [f"{api}.{op}.{notes}.*" for op in ("INFO", "DELETE")]
    deny = []
    for consumer in streams.worker_consumers():
        deny += [f"{api}.CREATE.{events}.{consumer}.>", f"{api}.CREATE.{events}.{consumer}"]
        deny += [f"{api}.{op}.{events}.{consumer}" for op in ("MSG.NEXT", "DELETE")]
    return {
        "publish": {"allow": allow, "deny": deny},
        "subscribe": {"allow": [own_notifications, f"{subjects.inbox_prefix(tenant)}.>"]},
    }


def server_config(registry: Registry, streams: Streams) -> str:
    """Return the nats-server configuration of the registry's users (JSON is valid NATS conf).

    A server started with ``-c`` on this file (plus its listen and JetStream flags), or a
    config that includes it, admits the service user with every permission and each tenant
    with its own; anyone else is refused.
    """
    users: list[dict[str, Any]] = []
    if registry.service is not None:
        users.append({"user": registry.service.user, "password": registry.service.password_hash})
    for tenant, credential in sorted(registry.tenants.items()):
        users.append(
            {
                "user": credential.user,
                "password": credential.password_hash,
                "permissions": tenant_permissions(tenant, streams),
            }
        )
    body = json.dumps({"users": users}, indent=2)
    return f"# Written by `memoryd tenants`: do not edit by hand.\nauthorization: {body}\n"


def added(registry: Registry, tenant: str, password: str, now: datetime) -> Registry:
    """Return the registry with ``tenant`` added (refused if it is already there)."""
    checked_tenant(tenant)
    if tenant in registry.tenants:
        raise TenantError(f"tenant {tenant!r} already has credentials: revoke it first")
    credential = Credential(tenant_user(tenant), hashed(password), now.isoformat())
    return replace(registry, tenants={**registry.tenants, tenant: credential})


def revoked(registry: Registry, tenant: str) -> Registry:
    """Return the registry without ``tenant`` (refused if it is not there)."""
    if tenant not in registry.tenants:
        raise TenantError(f"tenant {tenant!r} has no credentials")
    return replace(registry, tenants={k: v for k, v in registry.tenants.items() if k != tenant})


def with_service(registry: Registry, password: str, now: datetime) -> Registry:
    """Return the registry with a service user (the workers' credentials)."""
    credential = Credential(SERVICE_USER, hashed(password), now.isoformat())
    return replace(registry, service=credential)


def _credential(raw: Mapping[str, str]) -> Credential:
    return Credential(raw["user"], raw["password_hash"], raw["added_at"])


def load_registry(auth_dir: Path) -> Registry:
    """Read the registry under ``auth_dir`` (empty when none was written)."""
    path = auth_dir / REGISTRY_FILE
    if not path.exists():
        return Registry()
    raw = json.loads(path.read_text())
    service = _credential(raw["service"]) if raw.get("service") else None
    tenants = {name: _credential(entry) for name, entry in raw.get("tenants", {}).items()}
    return Registry(service, tenants)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by its owner only, replacing the file in one step."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    partial.replace(path)


def save(auth_dir: Path, registry: Registry, streams: Streams) -> Path:
    """Write the registry and the server config it implies; return the config's path."""
    raw = {
        "service": asdict(registry.service) if registry.service else None,
        "tenants": {name: asdict(credential) for name, credential in registry.tenants.items()},
    }
    _write_private(auth_dir / REGISTRY_FILE, json.dumps(raw, indent=2) + "\n")
    config = auth_dir / SERVER_CONFIG_FILE
    _write_private(config, server_config(registry, streams))
    return config


def write_service_env(auth_dir: Path, password: str) -> Path:
    """Write the service user's credentials as settings (owner-readable only); return the path."""
    path = auth_dir / SERVICE_ENV_FILE
    _write_private(path, f"MEMORYD_NATS_USER={SERVICE_USER}\nMEMORYD_NATS_PASSWORD={password}\n")
    return path


def reload_server(pid_file: Path) -> int | None:
    """Ask the nats-server whose pid ``pid_file`` holds to reload its config (SIGHUP).

    nats-server re-reads its users and closes the connections of users no longer allowed.
    Return the pid signalled, or None when no such server runs.
    """
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGHUP)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


def now_utc() -> datetime:
    """Return the current time (when a credential is made)."""
    return datetime.now(UTC)
