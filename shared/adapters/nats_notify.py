"""Publishing memory-updated notifications into their stream (live subscribers see them too)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import structlog
from nats.js import JetStreamContext

from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import MSG_ID, Outgoing, PublishFailed, StreamPublisher
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.settings import Settings

log = structlog.get_logger(__name__)


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

    Each publish is a JetStream publish (``StreamPublisher``, the log's own mechanism): core
    subscribers of the subject receive it as before, and the notification stream stores it
    (once per Nats-Msg-Id). Notifications the stream does not acknowledge after ``attempts``
    sends are logged as lost, not raised: the read model is committed already, and failing
    the batch would not bring it back.
    """

    def __init__(
        self, js: JetStreamContext, stream: str, *, ack_timeout: float = 2.0, attempts: int = 3
    ) -> None:
        # Each attempt waits for its acknowledgement, then at most 1 s before the next.
        bound = attempts * (ack_timeout + 1.0)
        self._stream = StreamPublisher(
            js, stream, attempts=attempts, total_timeout=bound, ack_timeout=ack_timeout
        )

    @classmethod
    def from_settings(cls, js: JetStreamContext, settings: Settings) -> NotificationPublisher:
        """Build a publisher for the settings' notification stream and acknowledgement wait."""
        return cls(
            js, settings.notify_stream_name, ack_timeout=settings.publish_ack_timeout_seconds
        )

    async def publish(self, notes: Sequence[MemoryUpdated]) -> None:
        """Publish ``notes`` pipelined, in order; resend the unacknowledged ones one by one."""
        try:
            await self._stream.send_many(_outgoing(note) for note in notes)
        except PublishFailed as lost:
            log.error(
                "notification_lost",
                event_ids=[str(note.event_id) for note in notes],
                error=str(lost),
            )


def _outgoing(note: MemoryUpdated) -> Outgoing:
    return Outgoing(
        notification_subject(note),
        note.model_dump_json().encode(),
        {MSG_ID: notification_id(note)},
    )
