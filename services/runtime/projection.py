"""Run a projection over batches of log messages: exactly-once effects on at-least-once delivery.

For each batch: decode (bad input goes to the dead-letter stream with its reason), apply the
events the projection has not applied yet and advance its tracking row in ONE transaction,
publish the derived events before that transaction commits (their ids are deterministic, so a
retry is deduplicated by the stream), commit, notify subscribers, and only then ack.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import EventPublisher, publish_dead_letter
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.contracts.events import AnyEvent, Event, decode_event, event_type_name
from memoryd.shared.contracts.notifications import MemoryUpdated

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Positioned:
    """An event and the stream sequence it was stored at."""

    event: AnyEvent
    sequence: int


@dataclass(slots=True)
class Effects:
    """What applying a batch produced besides the read-model change."""

    derived: list[Event] = field(default_factory=list)
    notifications: list[MemoryUpdated] = field(default_factory=list)

    def extend(self, other: Effects) -> None:
        """Add ``other``'s effects after these."""
        self.derived.extend(other.derived)
        self.notifications.extend(other.notifications)


class Projection(Protocol):
    """A fold of events into SQL read models."""

    consumer: str

    async def apply(self, session: AsyncSession, batch: Sequence[Positioned]) -> Effects:
        """Apply ``batch`` (in stream order, none applied before) inside ``session``."""
        ...


class DeadLetter(Exception):
    """An event that can never be applied, with the reason."""


def decode_message(data: bytes, subject: str) -> AnyEvent:
    """Decode one log message, checking it is filed under its own tenant, user and type."""
    try:
        event = decode_event(data)
    except ValidationError as error:
        raise DeadLetter(f"invalid event: {error}") from error
    expected = subjects.event_subject(event.scope, event_type_name(event))
    if subject != expected:
        raise DeadLetter(f"subject {subject!r} does not match the event (expected {expected!r})")
    return event


async def apply_once(
    sessions: async_sessionmaker[AsyncSession],
    projection: Projection,
    batch: Sequence[Positioned],
    publisher: EventPublisher | None,
) -> Effects:
    """Apply the not-yet-applied part of ``batch`` and advance tracking in one transaction."""
    async with sessions() as session, session.begin():
        applied = await tracking.position(session, projection.consumer)
        fresh = [item for item in batch if item.sequence > applied]
        if not fresh:
            return Effects()
        effects = await projection.apply(session, fresh)
        if publisher is not None and effects.derived:
            await publisher.publish_many(effects.derived)
        await tracking.advance(session, projection.consumer, fresh[-1].sequence)
    return effects


class ProjectionRunner:
    """Consume log messages for one projection (the thin handler around ``apply_once``)."""

    def __init__(
        self,
        projection: Projection,
        sessions: async_sessionmaker[AsyncSession],
        nc: NatsClient,
        js: JetStreamContext,
        publisher: EventPublisher,
        max_attempts: int = 5,
        retry_delay: float = 0.2,
    ) -> None:
        self.projection = projection
        self._sessions = sessions
        self._nc = nc
        self._js = js
        self._publisher = publisher
        self._max_attempts = max_attempts
        self._retry_delay = retry_delay
        self._log = log.bind(consumer=projection.consumer)

    async def handle(self, msgs: Sequence[Msg]) -> None:
        """Process a batch of messages in order; ack each only once its effect is durable."""
        good: list[tuple[Msg, Positioned]] = []
        for msg in msgs:
            sequence = msg.metadata.sequence.stream
            try:
                good.append((msg, Positioned(decode_message(msg.data, msg.subject), sequence)))
            except DeadLetter as reason:
                await self._park(msg, str(reason))
        if good:
            await self._apply(good)
        for msg in msgs:
            await msg.ack()

    async def _apply(self, good: list[tuple[Msg, Positioned]]) -> None:
        try:
            effects = await apply_once(
                self._sessions, self.projection, [p for _, p in good], self._publisher
            )
        except Exception:
            self._log.warning("batch_failed_retrying_one_by_one", size=len(good), exc_info=True)
            effects = Effects()
            for item in good:
                effects.extend(await self._apply_single(*item))
        await self._notify(effects.notifications)

    async def _apply_single(self, msg: Msg, item: Positioned) -> Effects:
        # Retry in place: nothing later in this user's log is applied before this one, so
        # order holds; a message that keeps failing is parked with the error as its reason.
        attempts = max(1, msg.metadata.num_delivered or 1)
        while True:
            try:
                return await apply_once(self._sessions, self.projection, [item], self._publisher)
            except Exception as error:
                self._log.warning(
                    "apply_failed",
                    event_id=str(item.event.event_id),
                    subject=msg.subject,
                    stream_seq=item.sequence,
                    attempt=attempts,
                    exc_info=True,
                )
                if attempts >= self._max_attempts:
                    await self._park(msg, f"apply failed after {attempts} attempts: {error!r}")
                    return Effects()
                attempts += 1
                await msg.in_progress()
                await asyncio.sleep(self._retry_delay * 2 ** (attempts - 2))

    async def _park(self, msg: Msg, reason: str) -> None:
        self._log.warning(
            "dead_lettered",
            subject=msg.subject,
            stream_seq=msg.metadata.sequence.stream,
            reason=reason[:300],
        )
        await publish_dead_letter(self._js, self.projection.consumer, msg, reason)

    async def _notify(self, notifications: Sequence[MemoryUpdated]) -> None:
        for note in notifications:
            await self._nc.publish(
                subjects.notify_subject(note.tenant, note.user_id, note.kind),
                note.model_dump_json().encode(),
            )
