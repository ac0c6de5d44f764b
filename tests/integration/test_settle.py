"""Waiting until the log is applied, against a real nats-server: the wait ends only when every
consumer has worked off the stream, and names the ones still behind when it gives up."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest
from nats.js import JetStreamContext, api

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
