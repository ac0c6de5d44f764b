"""The tenant registry and the server config `memoryd tenants` writes (pure parts)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import bcrypt
import pytest

from memoryd.shared import subjects
from memoryd.shared.adapters import nats_auth
from memoryd.shared.adapters.nats_auth import Registry, Streams, TenantError

NOW = datetime(2026, 11, 24, tzinfo=UTC)


def matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: '*' one token, '>' one or more trailing tokens."""
    want, got = pattern.split("."), subject.split(".")
    for index, token in enumerate(want):
        if token == ">":
            return len(got) > index
        if index >= len(got) or token not in ("*", got[index]):
            return False
    return len(got) == len(want)


def allowed(permissions: dict[str, dict[str, list[str]]], kind: str, subject: str) -> bool:
    rules = permissions[kind]
    if any(matches(p, subject) for p in rules.get("deny", [])):
        return False
    return any(matches(p, subject) for p in rules["allow"])


def test_a_tenant_may_use_its_own_subjects() -> None:
    perms = nats_auth.tenant_permissions("acme", Streams())
    assert allowed(perms, "publish", "memoryd.ev.acme.alice.turn_recorded_v1")
    assert allowed(perms, "publish", subjects.recall_subject("acme"))
    assert allowed(perms, "publish", subjects.list_memories_subject("acme"))
    assert allowed(perms, "subscribe", "memoryd.notify.acme.alice.page_added")
    assert allowed(perms, "subscribe", f"{subjects.inbox_prefix('acme')}.abc.1")
    assert allowed(
        perms, "publish", "$JS.API.CONSUMER.CREATE.MEMORYD_NOTIFY.n1.memoryd.notify.acme.*.>"
    )


@pytest.mark.parametrize(
    ("kind", "subject"),
    [
        ("publish", "memoryd.ev.globex.bob.turn_recorded_v1"),
        ("publish", "memoryd.rpc.globex.recall"),
        ("publish", "memoryd.dlq.memoryd-stm"),
        ("subscribe", "memoryd.notify.globex.bob.page_added"),
        ("subscribe", "memoryd.ev.acme.alice.turn_recorded_v1"),  # the log only via JetStream
        ("subscribe", "_INBOX_globex.abc.1"),
        ("subscribe", "_INBOX.abc"),
        ("publish", "$JS.API.CONSUMER.CREATE.MEMORYD.n1.memoryd.ev.globex.>"),
        ("publish", "$JS.API.CONSUMER.CREATE.MEMORYD.n1.memoryd.ev.>"),
        ("publish", "$JS.API.CONSUMER.CREATE.MEMORYD.n1"),
        ("publish", "$JS.API.CONSUMER.CREATE.MEMORYD"),
        ("publish", "$JS.API.CONSUMER.DURABLE.CREATE.MEMORYD.n1"),
        ("publish", "$JS.API.CONSUMER.CREATE.MEMORYD.memoryd-stm.memoryd.ev.acme.>"),
        ("publish", "$JS.API.CONSUMER.MSG.NEXT.MEMORYD.memoryd-stm"),
        ("publish", "$JS.API.CONSUMER.DELETE.MEMORYD.memoryd-indexer"),
        ("publish", "$JS.API.STREAM.INFO.MEMORYD"),
        ("publish", "$JS.API.STREAM.PURGE.MEMORYD"),
        ("publish", "$JS.API.CONSUMER.LIST.MEMORYD_NOTIFY"),
        ("publish", "$JS.API.CONSUMER.MSG.NEXT.MEMORYD_NOTIFY.someones-durable"),
        ("publish", "$JS.API.CONSUMER.CREATE.MEMORYD_NOTIFY.n1.memoryd.notify.globex.>"),
    ],
)
def test_a_tenant_may_not_use_another_tenants_subjects_or_the_workers(
    kind: str, subject: str
) -> None:
    assert not allowed(nats_auth.tenant_permissions("acme", Streams()), kind, subject)


def test_the_config_admits_the_service_and_each_tenant_with_a_hash_only() -> None:
    registry = nats_auth.with_service(Registry(), "service-secret", NOW)
    registry = nats_auth.added(registry, "acme", "acme-secret", NOW)
    text = nats_auth.server_config(registry, Streams())
    assert "acme-secret" not in text and "service-secret" not in text
    users = json.loads(text.split("authorization:", 1)[1])["users"]
    by_name = {user["user"]: user for user in users}
    assert "permissions" not in by_name[nats_auth.SERVICE_USER]
    acme = by_name["tenant-acme"]
    assert bcrypt.checkpw(b"acme-secret", acme["password"].encode())
    assert acme["permissions"] == nats_auth.tenant_permissions("acme", Streams())


def test_a_tenant_is_added_once_and_revoked_once() -> None:
    registry = nats_auth.added(Registry(), "acme", "pw", NOW)
    with pytest.raises(TenantError, match="already"):
        nats_auth.added(registry, "acme", "pw2", NOW)
    assert "acme" not in nats_auth.revoked(registry, "acme").tenants
    with pytest.raises(TenantError, match="no credentials"):
        nats_auth.revoked(Registry(), "acme")


@pytest.mark.parametrize("name", ["a.b", "a*", ">", "", "a b", "x" * 65])
def test_a_tenant_name_must_be_a_subject_token(name: str) -> None:
    with pytest.raises(TenantError, match="not a valid name"):
        nats_auth.added(Registry(), name, "pw", NOW)


def test_the_registry_round_trips_and_is_private(tmp_path: Path) -> None:
    registry = nats_auth.added(nats_auth.with_service(Registry(), "s", NOW), "acme", "a", NOW)
    config = nats_auth.save(tmp_path, registry, Streams())
    assert nats_auth.load_registry(tmp_path) == registry
    for path in (config, tmp_path / nats_auth.REGISTRY_FILE):
        assert path.stat().st_mode & 0o077 == 0
    assert nats_auth.load_registry(tmp_path / "none") == Registry()
