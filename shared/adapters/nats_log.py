"""The event log on NATS JetStream: streams, publishing, dead letters, settling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence

import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError

from memoryd.shared import subjects
from memoryd.shared.contracts.catalog import encode_event, event_type_name
from memoryd.shared.contracts.events import Event
from memoryd.shared.settings import Settings

MSG_ID = "Nats-Msg-Id"


def server_list(url: str) -> list[str]:
    """Split a comma-separated NATS URL list (a cluster's seed servers)."""
    return [part.strip() for part in url.split(",") if part.strip()]


async def connect(url: str, name: str = "memoryd") -> NatsClient:
    """Connect to NATS, retrying while a just-started server comes up."""
    return await nats.connect(
        server_list(url),
        name=name,
        connect_timeout=2,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.5,
    )


def event_stream_config(settings: Settings) -> api.StreamConfig:
    """Describe the stream that holds every event: the source of truth."""
    return api.StreamConfig(
        name=settings.stream_name,
        subjects=[subjects.ALL_EVENTS],
        storage=api.StorageType.FILE,
        retention=api.RetentionPolicy.LIMITS,
        duplicate_window=settings.duplicate_window_seconds,
        num_replicas=settings.stream_replicas,
    )


def dead_letter_stream_config(settings: Settings) -> api.StreamConfig:
    """Describe the stream that parks messages a worker could not process."""
    return api.StreamConfig(
        name=settings.dead_letter_stream,
        subjects=[subjects.ALL_DEAD_LETTERS],
        storage=api.StorageType.FILE,
        duplicate_window=settings.duplicate_window_seconds,
        num_replicas=settings.stream_replicas,
    )


async def ensure_streams(js: JetStreamContext, settings: Settings) -> None:
    """Create the event and dead-letter streams, or bring their config up to date."""
    for config in (event_stream_config(settings), dead_letter_stream_config(settings)):
        try:
            await js.stream_info(config.name or "")
        except NotFoundError:
            await js.add_stream(config)
        else:
            await js.update_stream(config)


class EventPublisher:
    """Append events to the log; the event id is the Nats-Msg-Id, so retries deduplicate."""

    def __init__(self, js: JetStreamContext, stream: str) -> None:
        self._js = js
        self._stream = stream

    async def publish(self, event: Event) -> int:
        """Append one event and return its stream sequence."""
        ack = await self._js.publish(
            subjects.event_subject(event.scope, event_type_name(event)),
            encode_event(event),
            stream=self._stream,
            headers={MSG_ID: str(event.event_id)},
        )
        return ack.seq

    async def publish_many(self, events: Iterable[Event]) -> list[int]:
        """Append events pipelined (one round trip's latency for the lot), in order."""
        futures = [
            await self._js.publish_async(
                subjects.event_subject(event.scope, event_type_name(event)),
                encode_event(event),
                stream=self._stream,
                headers={MSG_ID: str(event.event_id)},
            )
            for event in events
        ]
        acks = await asyncio.gather(*futures)
        return [ack.seq for ack in acks]


async def publish_dead_letter(
    js: JetStreamContext, consumer: str, subject: str, sequence: int, data: bytes, reason: str
) -> None:
    """Park the original bytes of a log message in the dead-letter stream with the reason."""
    await js.publish(
        subjects.dead_letter_subject(consumer),
        data,
        headers={
            MSG_ID: f"{consumer}:{sequence}",
            subjects.DLQ_REASON: reason[:2_000],
            subjects.DLQ_CONSUMER: consumer,
            subjects.DLQ_ORIGINAL_SUBJECT: subject,
            subjects.DLQ_ORIGINAL_SEQUENCE: str(sequence),
        },
    )


async def last_sequence(js: JetStreamContext, stream: str) -> int:
    """Return the sequence of the newest message in ``stream`` (0 when empty)."""
    info = await js.stream_info(stream)
    return info.state.last_seq


async def _consumer_settled(js: JetStreamContext, stream: str, durable: str) -> bool:
    try:
        info = await js.consumer_info(stream, durable)
    except NotFoundError:
        return False
    return info.num_pending == 0 and (info.num_ack_pending or 0) == 0


async def wait_until_applied(
    js: JetStreamContext,
    stream: str,
    consumers: Sequence[str] = subjects.PROJECTION_CONSUMERS,
    timeout: float = 30.0,
    poll_interval: float = 0.02,
) -> int:
    """Wait until every consumer has applied everything in the stream; return the sequence.

    Workers publish derived events while they work, so "settled" means: every consumer has
    nothing pending and unacked, and the stream did not grow while we looked.
    """
    deadline = time.monotonic() + timeout
    while True:
        before = await last_sequence(js, stream)
        settled = [await _consumer_settled(js, stream, name) for name in consumers]
        if all(settled) and await last_sequence(js, stream) == before:
            return before
        if time.monotonic() > deadline:
            waiting = [name for name, done in zip(consumers, settled, strict=True) if not done]
            raise TimeoutError(f"consumers still behind after {timeout}s: {waiting}")
        await asyncio.sleep(poll_interval)
