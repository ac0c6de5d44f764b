"""Replay's log reader on a real nats-server: every event through a sequence, in order, once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.js import JetStreamContext

from memoryd.services.runtime.replay import read_log
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import ensure_streams
from memoryd.shared.settings import Settings
from tests.conftest import _delete_streams

pytestmark = pytest.mark.integration

SUBJECT = f"{subjects.EVENTS_PREFIX}.t1.u1.turn"


@pytest.fixture
async def log(nats_url: str, tmp_path: Path) -> AsyncIterator[tuple[JetStreamContext, str]]:
    """A fresh event stream on the session's nats-server, and a JetStream context on it."""
    settings = Settings(data_dir=tmp_path, nats_url=nats_url)
    await _delete_streams(nats_url, settings)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await ensure_streams(js, settings)
    try:
        yield js, settings.stream_name
    finally:
        await nc.close()
        await _delete_streams(nats_url, settings)


async def publish(js: JetStreamContext, count: int) -> None:
    for i in range(count):
        await js.publish(SUBJECT, f"event {i + 1}".encode())


async def test_the_log_is_read_through_the_sequence_asked_and_no_further(
    log: tuple[JetStreamContext, str],
) -> None:
    js, stream = log
    await publish(js, 250)

    read = await read_log(js, stream, until=180)

    assert [(data, sequence) for data, _, sequence in read] == [
        (f"event {i}".encode(), i) for i in range(1, 181)
    ]
    assert {subject for _, subject, _ in read} == {SUBJECT}
    assert await read_log(js, stream, until=0) == []


async def test_a_sequence_past_the_end_reads_the_whole_log(
    log: tuple[JetStreamContext, str],
) -> None:
    js, stream = log
    await publish(js, 40)

    read = await read_log(js, stream, until=1_000, patience=2.0)

    assert [sequence for _, _, sequence in read] == list(range(1, 41))


async def test_events_deleted_from_the_log_are_skipped_and_the_rest_read(
    log: tuple[JetStreamContext, str],
) -> None:
    js, stream = log
    await publish(js, 30)
    for sequence in (1, 2, 15, 30):
        await js.delete_msg(stream, sequence)

    read = await read_log(js, stream, until=30, patience=2.0)

    assert [sequence for _, _, sequence in read] == [i for i in range(3, 30) if i != 15]


async def test_a_log_purged_through_the_sequence_reads_as_empty_not_as_a_timeout(
    log: tuple[JetStreamContext, str],
) -> None:
    js, stream = log
    await publish(js, 20)
    await js.purge_stream(stream)

    assert await read_log(js, stream, until=20, patience=2.0) == []
