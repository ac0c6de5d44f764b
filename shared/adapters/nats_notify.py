"""Publishing memory-updated notifications into their stream (live subscribers see them too)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

import nats.errors
import nats.js.errors
import structlog
from nats.js import JetStreamContext, api

from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import MSG_ID
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.settings import Settings

log = structlog.get_logger(__name__)

# Sending a notification again after one of these is safe: the stream drops the copy.
_RETRYABLE = (
    TimeoutError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)


def notification_subject(note: MemoryUpdated) -> str:
    """Return the subject ``note`` is published on (a recallable notice names its event)."""
    if note.kind == subjects.RECALLABLE_KIND:
        return subjects.recallable_subject(note.tenant, note.user_id, note.event_id)
    return subjects.notify_subject(note.tenant, note.user_id, note.kind)


def notification_id(note: MemoryUpdated) -> str:
    """Return the Nats-Msg-Id of a notification: the digest of its content.

    The same change notified twice (a batch retried one message at a time) is the same
    notification, so the stream keeps it once.
    """
    return hashlib.sha256(note.model_dump_json().encode()).hexdigest()[:32]


class NotificationPublisher:
    """Publish notifications on their per-tenant, per-user subjects and wait for the stream.

    Each publish is a JetStream publish: core subscribers of the subject receive it as before,
    and the notification stream stores it (once per Nats-Msg-Id). A notification the stream
    does not acknowledge after ``attempts`` sends is logged as lost, not raised: the read
    model is committed already, and failing the batch would not bring it back.
    """

    def __init__(
        self, js: JetStreamContext, stream: str, *, ack_timeout: float = 2.0, attempts: int = 3
    ) -> None:
        self._js = js
        self._stream = stream
        self._ack_timeout = ack_timeout
        self._attempts = attempts

    @classmethod
    def from_settings(cls, js: JetStreamContext, settings: Settings) -> NotificationPublisher:
        """Build a publisher for the settings' notification stream and acknowledgement wait."""
        return cls(
            js, settings.notify_stream_name, ack_timeout=settings.publish_ack_timeout_seconds
        )

    async def publish(self, notes: Sequence[MemoryUpdated]) -> None:
        """Publish ``notes`` pipelined, in order; resend the unacknowledged ones one by one."""
        futures = [await self._send_async(note) for note in notes]
        if futures:
            await asyncio.wait(futures, timeout=self._ack_timeout)
        for note, future in zip(notes, futures, strict=True):
            if not _acknowledged(future):
                await self._resend(note)

    async def _send_async(self, note: MemoryUpdated) -> asyncio.Future[api.PubAck]:
        return await self._js.publish_async(
            notification_subject(note),
            note.model_dump_json().encode(),
            stream=self._stream,
            headers={MSG_ID: notification_id(note)},
        )

    async def _resend(self, note: MemoryUpdated) -> None:
        for attempt in range(1, self._attempts + 1):
            try:
                await self._js.publish(
                    notification_subject(note),
                    note.model_dump_json().encode(),
                    timeout=self._ack_timeout,
                    stream=self._stream,
                    headers={MSG_ID: notification_id(note)},
                )
            except _RETRYABLE as error:
                log.warning(
                    "notification_retrying",
                    event_id=str(note.event_id),
                    kind=note.kind,
                    attempt=attempt,
                    error=type(error).__name__,
                )
            else:
                return
        log.error("notification_lost", event_id=str(note.event_id), kind=note.kind)


def _acknowledged(future: asyncio.Future[api.PubAck]) -> bool:
    if not future.done():
        future.cancel()
        return False
    return not future.cancelled() and future.exception() is None
