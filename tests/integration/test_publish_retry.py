"""A NATS restart while publishing: every event is stored exactly once and no publish raises."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import nats
import pytest

from memoryd.shared.adapters.embedded_nats import EmbeddedNats, free_port
from memoryd.shared.adapters.nats_log import ensure_streams
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, decode_event
from memoryd.shared.settings import Settings
from tests.conftest import unique

pytestmark = pytest.mark.integration

TURNS = 60
# Longer than a JetStream publish waits for its acknowledgement (nats-py: 5 s), so a publish
# sent while the server is away is buffered by the client, stored after the reconnect, and
# its first acknowledgement is lost.
DOWNTIME_SECONDS = 6.0


async def _stored_turn_ids(url: str, stream: str) -> list[uuid.UUID]:
    nc = await nats.connect(url)
    js = nc.jetstream()
    sub = await js.pull_subscribe("memoryd.ev.>", stream=stream)
    ids: list[uuid.UUID] = []
    while True:
        try:
            msgs = await sub.fetch(100, timeout=1)
        except TimeoutError:  # nats-py raises the built-in one or its own subclass
            break
        for msg in msgs:
            ids.append(decode_event(msg.data).event_id)
            await msg.ack()
    await nc.close()
    return ids


async def test_turns_published_across_a_nats_restart_are_stored_once(tmp_path: Path) -> None:
    """Restart nats-server (same store and port) mid-stream: no publish raises, none doubles."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port())
    await server.astart()
    try:
        settings = Settings(nats_url=server.url, data_dir=tmp_path)
        client = await MemoryClient.connect(server.url)  # the SDK's default retry bounds
        await ensure_streams(client._js, settings)
        scope = Scope(tenant="restart", user_id=unique("u"))
        published: list[uuid.UUID] = []
        under_way = asyncio.Event()

        async def publish_all() -> None:
            for i in range(TURNS):
                published.append(await client.record_turn(scope, f"q{i}", f"r{i}"))
                if i == 10:
                    under_way.set()
                await asyncio.sleep(0.02)

        publishing = asyncio.create_task(publish_all())
        await under_way.wait()
        await server.astop()
        await asyncio.sleep(DOWNTIME_SECONDS)
        await server.astart()
        await publishing  # raises if any publish did
        await client.close()

        stored = await _stored_turn_ids(server.url, settings.stream_name)
        assert TURNS == len(published)
        assert sorted(published) == sorted(stored)  # each once: none lost, none doubled
    finally:
        await server.astop()
