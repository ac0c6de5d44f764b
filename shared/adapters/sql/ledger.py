"""The applied-events ledger: which event ids a projection applied, at which sequence.

An event id is one event's identity on every projection. The log can still hold it twice
(a raw publish without ``Nats-Msg-Id``, or a republish after the duplicate window): the first
occurrence wins everywhere; a later copy with the same content is skipped as a duplicate, and
one with other content is refused (the runner dead-letters it with the reason).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import applied_events
from memoryd.shared.contracts.catalog import encode_event
from memoryd.shared.contracts.events import Event

_CHUNK = 500  # ids per IN (...) clause: far below SQLite's bound-parameter limit


class Sequenced(Protocol):
    """An event and the stream sequence it was stored at."""

    @property
    def event(self) -> Event: ...

    @property
    def sequence(self) -> int: ...


T = TypeVar("T", bound=Sequenced)


@dataclass(frozen=True, slots=True)
class FirstSeen:
    """Where an event id was first applied, and a digest of that event."""

    sequence: int
    digest: str


@dataclass(slots=True)
class Admission(Generic[T]):
    """What a batch holds: events to apply, copies to skip, conflicting copies to refuse."""

    admitted: list[T] = field(default_factory=list)
    duplicates: list[T] = field(default_factory=list)
    conflicts: list[tuple[T, str]] = field(default_factory=list)
    new: dict[uuid.UUID, FirstSeen] = field(default_factory=dict)


def digest(event: Event) -> str:
    """Return a digest of an event's canonical JSON (equal events, equal digests)."""
    return hashlib.sha256(encode_event(event)).hexdigest()


def admit(batch: Sequence[T], seen: Mapping[uuid.UUID, FirstSeen]) -> Admission[T]:
    """Sort a batch (in log order) by whether each event id was applied before."""
    admission: Admission[T] = Admission()
    for item in batch:
        event_id = item.event.event_id
        mine = FirstSeen(item.sequence, digest(item.event))
        first = seen.get(event_id) or admission.new.get(event_id)
        if first is None:
            admission.new[event_id] = mine
            admission.admitted.append(item)
        elif first.digest == mine.digest:
            admission.duplicates.append(item)
        else:
            admission.conflicts.append(
                (
                    item,
                    f"event_id {event_id} was first applied at stream seq {first.sequence} "
                    "with other content; the first occurrence wins",
                )
            )
    return admission


async def first_seen(
    session: AsyncSession, consumer: str, ids: Iterable[uuid.UUID]
) -> dict[uuid.UUID, FirstSeen]:
    """Return where ``consumer`` first applied each of ``ids`` it has applied."""
    wanted = list(dict.fromkeys(ids))
    found: dict[uuid.UUID, FirstSeen] = {}
    for start in range(0, len(wanted), _CHUNK):
        rows = await session.execute(
            select(applied_events.c.event_id, applied_events.c.stream_seq, applied_events.c.digest)
            .where(applied_events.c.consumer == consumer)
            .where(applied_events.c.event_id.in_(wanted[start : start + _CHUNK]))
        )
        found.update({row.event_id: FirstSeen(row.stream_seq, row.digest) for row in rows})
    return found


async def record(session: AsyncSession, consumer: str, new: Mapping[uuid.UUID, FirstSeen]) -> None:
    """Record the newly applied event ids (same transaction as the change)."""
    if new:
        await session.execute(
            insert(applied_events),
            [
                {
                    "consumer": consumer,
                    "event_id": event_id,
                    "stream_seq": first.sequence,
                    "digest": first.digest,
                }
                for event_id, first in new.items()
            ],
        )


async def forget_consumers(session: AsyncSession, consumers: Sequence[str]) -> None:
    """Drop the ledger of these consumers (their read models are being rebuilt)."""
    await session.execute(delete(applied_events).where(applied_events.c.consumer.in_(consumers)))


async def forget_events(session: AsyncSession, ids: Iterable[uuid.UUID]) -> int:
    """Drop every consumer's ledger rows of these event ids (purged from the log); count them."""
    wanted = list(dict.fromkeys(ids))
    gone = 0
    for start in range(0, len(wanted), _CHUNK):
        chunk = wanted[start : start + _CHUNK]
        result = await session.execute(
            delete(applied_events).where(applied_events.c.event_id.in_(chunk))
        )
        gone += max(result.rowcount or 0, 0)  # type: ignore[attr-defined]
    return gone
