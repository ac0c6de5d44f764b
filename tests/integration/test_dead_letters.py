"""Dead letters: one per consumer, shown once per original message, retried and purged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import nats
import pytest
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from sqlalchemy import select

from memoryd.services.bootstrap import Stack
from memoryd.shared import subjects
from memoryd.shared.adapters.dead_letters import (
    group_dead_letters,
    purge_dead_letters,
    read_dead_letters,
    retry_dead_letters,
)
from memoryd.shared.adapters.nats_log import EventPublisher, ensure_streams, publish_dead_letter
from memoryd.shared.adapters.sql.tables import stm_pages
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, TurnRecorded, encode_event
from memoryd.shared.settings import Settings
from tests.conftest import consumers_reading, unique

pytestmark = pytest.mark.integration

CONSUMERS = ("memoryd-stm", "memoryd-memories", "memoryd-indexer")


@pytest.fixture
async def log(nats_url: str) -> AsyncIterator[tuple[JetStreamContext, Settings]]:
    """Yield JetStream on fresh event and dead-letter streams (no workers)."""
    settings = Settings(nats_url=nats_url)
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    for name in (settings.stream_name, settings.dead_letter_stream):
        with contextlib.suppress(NotFoundError):
            await js.delete_stream(name)
    await ensure_streams(js, settings)
    yield js, settings
    await nc.close()


async def _parked_turn(js: JetStreamContext, settings: Settings) -> tuple[int, bytes, str]:
    """Publish a turn (its id as Nats-Msg-Id) and park it as three consumers would."""
    turn = TurnRecorded(
        occurred_at=datetime.now(UTC),
        scope=Scope(tenant="dlq", user_id=unique("u")),
        query="q",
        response="r",
    )
    sequence = await EventPublisher(js, settings.stream_name).publish(turn)
    subject = subjects.event_subject(turn.scope, "turn.recorded.v1")
    data = encode_event(turn)
    for consumer in CONSUMERS:
        reason = "apply failed after 5 attempts: ModuleNotFoundError('sentence_transformers')"
        await publish_dead_letter(
            js, consumer, subject=subject, sequence=sequence, data=data, reason=reason
        )
    return sequence, data, subject


async def test_an_empty_dead_letter_stream_reads_as_none(
    log: tuple[JetStreamContext, Settings],
) -> None:
    """Nothing parked yet: no dead letter, and no error (an empty stream has no message 0)."""
    js, settings = log

    assert [] == await read_dead_letters(js, settings.dead_letter_stream, None)
    assert [] == await read_dead_letters(js, settings.dead_letter_stream, 10)


async def test_letters_group_by_original_message(
    log: tuple[JetStreamContext, Settings],
) -> None:
    """Three consumers' letters for one message make one group, its reason given once."""
    js, settings = log
    sequence, data, subject = await _parked_turn(js, settings)
    groups = group_dead_letters(await read_dead_letters(js, settings.dead_letter_stream))
    assert [(sequence, subject, data)] == [
        (g.original_sequence, g.original_subject, g.data) for g in groups
    ]
    assert list(CONSUMERS) == groups[0].consumers
    assert 1 == len(groups[0].reasons)


async def test_retry_republishes_the_original_once_despite_the_duplicate_window(
    log: tuple[JetStreamContext, Settings],
) -> None:
    """Retry appends the original bytes once more (not dropped as a duplicate), letters gone."""
    js, settings = log
    sequence, data, subject = await _parked_turn(js, settings)
    groups = group_dead_letters(await read_dead_letters(js, settings.dead_letter_stream))
    new = await retry_dead_letters(js, settings.dead_letter_stream, settings.stream_name, groups)
    assert [sequence + 1] == new
    copy = await js.get_msg(settings.stream_name, new[0])
    assert (subject, data) == (copy.subject, copy.data)
    assert 0 == (await js.stream_info(settings.dead_letter_stream)).state.messages


async def test_purge_deletes_the_letters(log: tuple[JetStreamContext, Settings]) -> None:
    """Purge empties the dead-letter stream and re-delivers nothing."""
    js, settings = log
    await _parked_turn(js, settings)
    groups = group_dead_letters(await read_dead_letters(js, settings.dead_letter_stream))
    assert len(CONSUMERS) == await purge_dead_letters(js, settings.dead_letter_stream, groups)
    assert 0 == (await js.stream_info(settings.dead_letter_stream)).state.messages
    assert 1 == (await js.stream_info(settings.stream_name)).state.messages


def _memoryd(args: list[str], nats_url: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "memoryd.services.cli", *args],
        env={**os.environ, "MEMORYD_NATS_URL": nats_url},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert 0 == result.returncode, result.stderr
    return result.stdout


async def test_cli_shows_one_entry_per_message_then_retries(
    log: tuple[JetStreamContext, Settings], nats_url: str
) -> None:
    """`memoryd dead-letters` lists the message once with its consumers; --retry empties it."""
    js, settings = log
    sequence, _, subject = await _parked_turn(js, settings)
    shown = await asyncio.to_thread(_memoryd, ["dead-letters"], nats_url)
    assert 1 == shown.count("original #")
    assert f"original #{sequence} {subject}" in shown
    assert f"[{', '.join(CONSUMERS)}]" in shown
    retried = await asyncio.to_thread(_memoryd, ["dead-letters", "--retry"], nats_url)
    assert "re-delivered 1 messages" in retried
    assert 0 == (await js.stream_info(settings.dead_letter_stream)).state.messages


async def _letters(js: JetStreamContext, settings: Settings, count: int) -> None:
    deadline = time.monotonic() + 60
    while (await js.stream_info(settings.dead_letter_stream)).state.messages < count:
        assert time.monotonic() < deadline, "the workers did not park the message"
        await asyncio.sleep(0.1)


async def test_a_malformed_event_then_a_retried_fix_through_the_workers(
    stack: Stack, client: MemoryClient
) -> None:
    """Every worker reading a malformed event's type parks it with one one-line reason (the
    others never receive it); a retry is applied."""
    js, settings = stack.js, stack.settings
    user = unique("u")
    subject = f"{subjects.EVENTS_PREFIX}.acme.{user}.turn_recorded_v1"
    malformed = {
        "type": "turn.recorded.v1",
        "event_id": str(uuid.uuid4()),
        "scope": {"tenant": "acme"},
    }
    await js.publish(subject, json.dumps(malformed).encode())
    readers = consumers_reading(stack, subject)
    await _letters(js, settings, len(readers))
    groups = group_dead_letters(await read_dead_letters(js, settings.dead_letter_stream))
    assert 1 == len(groups)
    assert readers == sorted(groups[0].consumers)
    assert subjects.MEMORIES_CONSUMER not in readers  # it folds no turn: it never saw one
    [reason] = groups[0].reasons
    assert "\n" not in reason
    assert reason.startswith("invalid event: ")
    assert "scope.user_id: Field required" in reason
    await purge_dead_letters(js, settings.dead_letter_stream, groups)

    # A valid turn every worker had parked (say, before a fix was deployed) is re-delivered.
    turn = TurnRecorded(
        occurred_at=datetime.now(UTC),
        scope=Scope(tenant="acme", user_id=user),
        query="q",
        response="r",
    )
    turn_subject = subjects.event_subject(turn.scope, "turn.recorded.v1")
    data = encode_event(turn)
    await publish_dead_letter(
        js, "memoryd-stm", subject=turn_subject, sequence=999, data=data, reason="apply failed"
    )
    groups = group_dead_letters(await read_dead_letters(js, settings.dead_letter_stream))
    await retry_dead_letters(js, settings.dead_letter_stream, settings.stream_name, groups)
    await client.wait_until_applied(timeout=60)
    async with stack.sessions() as session:
        query = select(stm_pages.c.turn_id).where(stm_pages.c.user_id == user)
        assert [turn.event_id] == list(await session.scalars(query))
