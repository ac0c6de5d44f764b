"""Read the dead-letter stream (what was parked, by whom, why)."""

from __future__ import annotations

from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from memoryd.shared import subjects


@dataclass(frozen=True)
class DeadLetter:
    """One parked message with its reason and origin."""

    sequence: int
    consumer: str
    reason: str
    original_subject: str
    original_sequence: int
    data: bytes


async def read_dead_letters(
    js: JetStreamContext, stream: str, limit: int = 100
) -> list[DeadLetter]:
    """Return up to ``limit`` of the newest dead letters, oldest first."""
    info = await js.stream_info(stream)
    first = max(info.state.first_seq, info.state.last_seq - limit + 1)
    letters = []
    for sequence in range(first, info.state.last_seq + 1):
        try:
            msg = await js.get_msg(stream, sequence)
        except NotFoundError:
            continue
        headers = msg.headers or {}
        letters.append(
            DeadLetter(
                sequence=sequence,
                consumer=headers.get(subjects.DLQ_CONSUMER, ""),
                reason=headers.get(subjects.DLQ_REASON, ""),
                original_subject=headers.get(subjects.DLQ_ORIGINAL_SUBJECT, ""),
                original_sequence=int(headers.get(subjects.DLQ_ORIGINAL_SEQUENCE, "0")),
                data=msg.data or b"",
            )
        )
    return letters
