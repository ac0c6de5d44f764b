"""Tenants walled off by nats-server itself: `memoryd tenants` credentials against a real server.

The server runs with the config `memoryd tenants` writes; the workers and the query service
run as its service user. Tenant A's credentials are refused on every subject of tenant B
(publish, subscribe, request, reply inbox, JetStream consumers), and a revoked tenant is cut
off. Only the tenant's own subjects work.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import nats
import nats.errors
import pytest
from nats.js import api
from pydantic import SecretStr

from memoryd.services.bootstrap import Stack, start_stack
from memoryd.shared import subjects
from memoryd.shared.adapters.embedded_nats import EmbeddedNats
from memoryd.shared.adapters.nats_log import NatsAuth, NatsRefused, read_subjects
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import RecallError, RecallRequest, Scope
from memoryd.shared.settings import Settings

pytestmark = pytest.mark.integration


def memoryd(data_dir: Path, *args: str) -> str:
    """Run the `memoryd` command as a user would; return its output (it must succeed)."""
    env = {**os.environ, "MEMORYD_DATA_DIR": str(data_dir), "MEMORYD_LOG_FORMAT": "console"}
    done = subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def settings_of(output: str) -> dict[str, str]:
    """Read the KEY=VALUE lines `memoryd tenants add` printed (or service.env holds)."""
    pairs = (line.split("=", 1) for line in output.splitlines() if "=" in line)
    return {key: value for key, value in pairs if not key.startswith("#")}


def auth_of(values: dict[str, str]) -> NatsAuth:
    return NatsAuth(
        values["MEMORYD_NATS_USER"],
        SecretStr(values["MEMORYD_NATS_PASSWORD"]),
        values.get("MEMORYD_NATS_TENANT"),
    )


@dataclass
class Walled:
    """A nats-server with tenant auth on, memoryd running as its service user."""

    data_dir: Path
    server: EmbeddedNats
    stack: Stack
    acme: NatsAuth
    globex: NatsAuth


@pytest.fixture(scope="module")
def auth_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data_dir = tmp_path_factory.mktemp("walled")
    yield data_dir


@pytest.fixture(scope="module")
async def walled(auth_dir: Path) -> AsyncIterator[Walled]:
    data_dir = auth_dir
    acme = settings_of(memoryd(data_dir, "tenants", "add", "acme"))
    globex = settings_of(memoryd(data_dir, "tenants", "add", "globex"))
    service = settings_of((data_dir / "auth" / "service.env").read_text())
    server = EmbeddedNats(data_dir / "nats", config=data_dir / "auth" / "auth.conf")
    await server.astart()
    settings = Settings(
        data_dir=data_dir / "stack",
        nats_url=server.url,
        nats_user=service["MEMORYD_NATS_USER"],
        nats_password=SecretStr(service["MEMORYD_NATS_PASSWORD"]),
        log_format="console",
    )
    stack = await start_stack(settings)
    try:
        yield Walled(data_dir, server, stack, auth_of(acme), auth_of(globex))
    finally:
        await stack.stop()
        await server.astop()


async def test_without_credentials_the_server_refuses(walled: Walled) -> None:
    with pytest.raises(NatsRefused, match="refused this process's credentials"):
        await MemoryClient.connect(walled.server.url, timeout=3)
    wrong = NatsAuth(walled.acme.user, SecretStr("not-the-password"), "acme")
    with pytest.raises(NatsRefused):
        await MemoryClient.connect(walled.server.url, timeout=3, auth=wrong)


async def test_a_tenant_works_on_its_own_subjects(walled: Walled) -> None:
    """Record, be notified, wait until recallable, recall, list, read history: all allowed."""
    alice = Scope(tenant="acme", user_id="alice")
    connected = MemoryClient.connect(walled.server.url, auth=walled.acme)
    async with await connected as client, client.notifications("acme", "alice") as live:
        turn = await client.record_turn(alice, "I keep bees on my roof", "Lovely hobby.")
        memory = await client.remember(alice, "Alice keeps bees", key="hobby")
        await client.recallable(turn, timeout=60, scope=alice)
        await client.wait_until_applied(timeout=60, scope=alice)
        await client.wait_until_applied(timeout=60)  # the tenant's events only
        noticed = await asyncio.wait_for(live.get(), 30)
        answer = await client.recall(alice, "bees", timeout=30)
        listed = await client.list_memories(alice)
        history = await client.memory_history(alice, key="hobby")
        durable = "acme-watch"
        async with client.notifications("acme", durable=durable, start="all") as stored:
            replayed = await asyncio.wait_for(stored.get(), 30)

    assert "acme" == noticed.tenant == replayed.tenant
    assert str(turn) in {item.turn_id for item in answer.items}
    assert [memory] == [m.memory_id for m in listed.memories]
    assert ["Alice keeps bees"] == [getattr(e, "content", None) for e in history]


async def _errors_of(url: str, auth: NatsAuth) -> tuple[nats.NATS, list[str]]:
    errors: list[str] = []

    async def collect(error: Exception) -> None:
        errors.append(str(error))

    nc = await nats.connect(url, error_cb=collect, **auth.options())
    return nc, errors


async def _refused(errors: list[str], subject: str) -> bool:
    for _ in range(50):
        if any("permissions violation" in e and subject.lower() in e for e in errors):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_tenant_is_refused_on_every_subject_of_another(walled: Walled) -> None:
    """acme's credentials: publish, subscribe, request, inbox and JetStream on globex refused."""
    url, bob = walled.server.url, Scope(tenant="globex", user_id="bob")
    nc, errors = await _errors_of(url, walled.acme)
    js = nc.jetstream()
    seen: list[bytes] = []

    async def spy(message: nats.aio.msg.Msg) -> None:
        seen.append(message.data)

    # Publish into globex's log.
    event_subject = subjects.event_subject(bob, "turn.recorded.v1")
    with pytest.raises(nats.errors.TimeoutError):
        await js.publish(event_subject, b"{}", timeout=1)
    assert await _refused(errors, event_subject)
    # Subscribe to globex's notifications and to its reply inboxes.
    for subject in (subjects.notify_filter("globex"), f"{subjects.inbox_prefix('globex')}.>"):
        await nc.subscribe(subject, cb=spy)
        assert await _refused(errors, subject), errors
    # Request globex's recall.
    recall = subjects.recall_subject("globex")
    with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
        await nc.request(recall, RecallRequest(scope=bob).model_dump_json().encode(), timeout=1)
    assert await _refused(errors, recall)
    # Read globex's events through JetStream, or pull the workers' messages.
    for config in (
        api.ConsumerConfig(name="peek", filter_subject=subjects.tenant_events_filter("globex")),
        api.ConsumerConfig(name="peek-all", filter_subject=subjects.ALL_EVENTS),
    ):
        with pytest.raises(nats.errors.TimeoutError):
            await js.add_consumer(walled.stack.settings.stream_name, config, timeout=1)
    steal = f"$JS.API.CONSUMER.MSG.NEXT.{walled.stack.settings.stream_name}.{subjects.STM_CONSUMER}"
    with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
        await nc.request(steal, b'{"batch": 1}', timeout=1)
    assert await _refused(errors, steal)

    # Meanwhile globex's own traffic flows (a durable subscription among it), and acme,
    # knowing that subscription's name, can pull nothing from it.
    connected = MemoryClient.connect(url, auth=walled.globex)
    watching = ("globex", "bob")
    async with await connected as globex, globex.notifications(*watching, durable="gx") as watch:
        turn = await globex.record_turn(bob, "My locker code is 4711", "Noted.")
        await globex.recallable(turn, timeout=60, scope=bob)
        assert "globex" == (await asyncio.wait_for(watch.get(), 30)).tenant
        pull = "$JS.API.CONSUMER.MSG.NEXT.MEMORYD_NOTIFY.gx"
        with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
            await nc.request(pull, b'{"batch": 1}', timeout=1)
        assert await _refused(errors, pull)
    await nc.close()
    assert [] == seen
    name, events = walled.stack.settings.stream_name, subjects.tenant_events_filter("globex")
    stored = await read_subjects(walled.stack.js, name, [events])
    assert stored and b"{}" not in stored  # globex's own events only, none of acme's


async def test_a_payload_naming_another_tenant_is_forbidden(walled: Walled) -> None:
    """acme sends globex's scope on its own recall subject: refused, nothing of globex read."""
    nc = await nats.connect(walled.server.url, **walled.acme.options())
    request = RecallRequest(scope=Scope(tenant="globex", user_id="bob"), query="locker code")
    reply = await nc.request(
        subjects.recall_subject("acme"), request.model_dump_json().encode(), timeout=10
    )
    await nc.close()
    error = RecallError.model_validate_json(reply.data)
    assert "forbidden" == error.code
    assert "4711" not in reply.data.decode()


async def test_a_revoked_tenant_is_cut_off(walled: Walled) -> None:
    """A tenant added while the server runs gets in; revoked, its connection is closed."""
    pid_file = str(walled.server.pid_file)
    added = memoryd(walled.data_dir, "tenants", "add", "initech", "--nats-pid-file", pid_file)
    assert "reloaded" in added
    initech, carol = auth_of(settings_of(added)), Scope(tenant="initech", user_id="carol")
    async with await MemoryClient.connect(walled.server.url, auth=initech) as client:
        await client.record_turn(carol, "hello", "hi")
    nc = await nats.connect(walled.server.url, max_reconnect_attempts=2, **initech.options())
    listed = memoryd(walled.data_dir, "tenants", "list")
    assert {"acme", "globex", "initech"} == {line.split("\t")[0] for line in listed.splitlines()}

    revoked = memoryd(walled.data_dir, "tenants", "revoke", "initech", "--nats-pid-file", pid_file)

    assert "reloaded" in revoked
    for _ in range(100):
        if not nc.is_connected:
            break
        await asyncio.sleep(0.1)
    assert not nc.is_connected
    with pytest.raises(NatsRefused):
        await MemoryClient.connect(walled.server.url, auth=initech, timeout=3)
    await nc.close()
