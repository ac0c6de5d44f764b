"""Read, group, retry and purge the dead-letter stream (what was parked, by whom, why).

A message no worker could process is parked once per consumer (each consumer keeps its own
position), so one malformed event makes one dead letter per worker. People see them grouped
by the original message: its stream sequence, the consumers that parked it, the reason once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from memoryd.shared import subjects

MSG_ID = "Nats-Msg-Id"


@dataclass(frozen=True)
class DeadLetter:
    """One parked message with its reason and origin."""

    sequence: int
    consumer: str
    reason: str
    original_subject: str
    original_sequence: int
    data: bytes


@dataclass(frozen=True)
class DeadLetterGroup:
    """The dead letters of one original message: one per consumer that parked it."""

    original_sequence: int
    original_subject: str
    data: bytes
    letters: tuple[DeadLetter, ...]

    @property
    def consumers(self) -> list[str]:
        """Return the consumers that parked the message, in the order they did."""
        return [letter.consumer for letter in self.letters]

    @property
    def reasons(self) -> dict[str, list[str]]:
        """Return each distinct reason with the consumers that gave it."""
        reasons: dict[str, list[str]] = {}
        for letter in self.letters:
            reasons.setdefault(letter.reason, []).append(letter.consumer)
        return reasons

    @property
    def sequences(self) -> list[int]:
        """Return the dead-letter stream sequences of the group's letters."""
        return [letter.sequence for letter in self.letters]


async def read_dead_letters(
    js: JetStreamContext, stream: str, limit: int | None = 100
) -> list[DeadLetter]:
    """Return up to ``limit`` (None: all) of the newest dead letters, oldest first."""
    info = await js.stream_info(stream)
    first = max(info.state.first_seq, 1)  # an empty stream says 0: there is no message 0
    if limit is not None:
        first = max(first, info.state.last_seq - limit + 1)
    letters = []
    for sequence in range(first, info.state.last_seq + 1):
        try:
            msg = await js.get_msg(stream, sequence)
        except NotFoundError:
            continue
        letters.append(letter_of(sequence, msg.headers or {}, msg.data or b""))
    return letters


def letter_of(sequence: int, headers: Mapping[str, str], data: bytes) -> DeadLetter:
    """Return a dead letter from its stream message: the headers say where it came from."""
    return DeadLetter(
        sequence=sequence,
        consumer=headers.get(subjects.DLQ_CONSUMER, ""),
        reason=headers.get(subjects.DLQ_REASON, ""),
        original_subject=headers.get(subjects.DLQ_ORIGINAL_SUBJECT, ""),
        original_sequence=int(headers.get(subjects.DLQ_ORIGINAL_SEQUENCE, "0")),
        data=data,
    )


def group_dead_letters(letters: Sequence[DeadLetter]) -> list[DeadLetterGroup]:
    """Group dead letters by original message (stream sequence), oldest original first."""
    groups: dict[tuple[int, str], list[DeadLetter]] = {}
    for letter in letters:
        # A letter without its origin (an old or foreign one) stays a group of its own.
        key = (letter.original_sequence or -letter.sequence, letter.original_subject)
        groups.setdefault(key, []).append(letter)
    return [
        DeadLetterGroup(
            original_sequence=members[0].original_sequence,
            original_subject=members[0].original_subject,
            data=members[0].data,
            letters=tuple(members),
        )
        for _, members in sorted(groups.items(), key=lambda item: item[1][0].sequence)
    ]


async def retry_dead_letters(
    js: JetStreamContext,
    dead_letter_stream: str,
    event_stream: str,
    groups: Sequence[DeadLetterGroup],
) -> list[int]:
    """Publish each group's original bytes again to its subject, then delete its letters.

    For use once the cause is fixed (a deployed fix, an installed model). The copy is a new
    message at the end of the log that every consumer receives. Its Nats-Msg-Id is
    ``retry:<dead-letter sequence>``: the original id may still be in the stream's duplicate
    window, which would drop the copy silently. Return the new stream sequences.
    """
    sequences = []
    for group in groups:
        if not group.original_subject.startswith(subjects.EVENTS_PREFIX + "."):
            continue  # not from the event log: nothing to re-deliver it to
        ack = await js.publish(
            group.original_subject,
            group.data,
            stream=event_stream,
            headers={MSG_ID: f"retry:{group.letters[0].sequence}"},
        )
        sequences.append(ack.seq)
        await _delete(js, dead_letter_stream, group)
    return sequences


async def purge_dead_letters(
    js: JetStreamContext, dead_letter_stream: str, groups: Sequence[DeadLetterGroup]
) -> int:
    """Delete the groups' dead letters (and only those); return how many were deleted."""
    for group in groups:
        await _delete(js, dead_letter_stream, group)
    return sum(len(group.letters) for group in groups)


async def _delete(js: JetStreamContext, stream: str, group: DeadLetterGroup) -> None:
    for sequence in group.sequences:
        try:
            await js.delete_msg(stream, sequence)
        except NotFoundError:
            continue  # deleted meanwhile (another --purge)
