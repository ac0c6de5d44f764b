"""Waiting until the log is applied, against a real nats-server: the wait ends only when every
consumer has worked off the stream, names the ones still behind when it gives up, and outlasts
a server that is slow to answer for a moment."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext, api

from memoryd.shared.adapters.embedded_nats import PID_FILE, EmbeddedNats, free_port
from memoryd.shared.adapters.nats_log import wait_until_applied
from tests.conftest import unique

pytestmark = pytest.mark.integration

CONSUMERS = ("first", "second", "third")


@pytest.fixture
async def stream(nats_url: str) -> AsyncIterator[tuple[JetStreamContext, str]]:
    """A stream of three messages and three consumers, none of which has applied any."""
    connection = await nats.connect(nats_url)
    js = connection.jetstream()
    name = unique("settle")
    await js.add_stream(name=name, subjects=[f"{name}.>"])
    for durable in CONSUMERS:
        config = api.ConsumerConfig(durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT)
        await js.add_consumer(name, config)
    for n in range(3):
        await js.publish(f"{name}.turn", f"{n}".encode())
    try:
        yield js, name
    finally:
        await js.delete_stream(name)
        await connection.close()


async def _apply(js: JetStreamContext, stream: str, durable: str) -> None:
    """Work off ``durable``'s backlog: take and acknowledge everything it has."""
    reader = await js.pull_subscribe_bind(durable, stream)
    info = await js.consumer_info(stream, durable)
    if info.num_pending:
        for message in await reader.fetch(info.num_pending, timeout=5):
            await message.ack_sync()
    await reader.unsubscribe()


async def test_the_wait_names_every_consumer_still_behind(
    stream: tuple[JetStreamContext, str],
) -> None:
    js, name = stream
    await _apply(js, name, "second")

    with pytest.raises(TimeoutError) as refused:
        await wait_until_applied(js, name, CONSUMERS, timeout=0.3)

    assert "['first', 'third']" in str(refused.value)


async def test_the_wait_ends_once_the_last_consumer_behind_has_caught_up(
    stream: tuple[JetStreamContext, str],
) -> None:
    js, name = stream
    for durable in ("third", "first"):
        await _apply(js, name, durable)
    with pytest.raises(TimeoutError, match=r"\['second'\]"):
        await wait_until_applied(js, name, CONSUMERS, timeout=0.3)

    await _apply(js, name, "second")

    assert 3 == await wait_until_applied(js, name, CONSUMERS, timeout=5)


async def test_the_wait_outlasts_a_server_that_answers_late(tmp_path: Path) -> None:
    """A JetStream API request the server does not answer in time (a bench run on a busy
    2-core machine failed so) is asked again: the wait ends once the server answers."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port())
    await server.astart()
    try:
        connection = await nats.connect(server.url)
        js = connection.jetstream(timeout=0.5)
        await js.add_stream(name="late", subjects=["late.>"])
        config = api.ConsumerConfig(durable_name="first", ack_policy=api.AckPolicy.EXPLICIT)
        await js.add_consumer("late", config)
        await js.publish("late.turn", b"0")
        await _apply(js, "late", "first")
        pid = int((tmp_path / "nats" / PID_FILE).read_text())

        os.kill(pid, signal.SIGSTOP)  # every request now waits past its 0.5 s
        waiting = asyncio.create_task(wait_until_applied(js, "late", ["first"], timeout=30))
        await asyncio.sleep(1.5)
        os.kill(pid, signal.SIGCONT)

        assert 1 == await waiting
        await connection.close()
    finally:
        await server.astop()
