"""Tracking rows: which stream sequence each projection has applied, and last changed at.

A projection's position moves with every batch it handles (its consumer reads the event
types it folds, the gate consumer every event); its version (the sequence of its last batch
that changed its read models) moves only with a change, so a reader's cache outlives the
log's unrelated traffic.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared import subjects
from memoryd.shared.adapters.sql.tables import log_identity, read_model_versions, tracking
from memoryd.shared.adapters.sql.upsert import upsert


async def position(session: AsyncSession, consumer: str, *, lock: bool = False) -> int:
    """Return the last stream sequence ``consumer`` applied (0 if none).

    ``lock`` holds the row until the transaction ends (PostgreSQL; SQLite has one writer
    anyway): two workers of one consumer then apply one after the other, each only what the
    other had not.
    """
    query = select(tracking.c.position).where(tracking.c.consumer == consumer)
    value = await session.scalar(query.with_for_update() if lock else query)
    return int(value or 0)


async def ensure(session: AsyncSession, consumer: str) -> None:
    """Give ``consumer`` a position row (0) if it has none, so that it can be locked."""
    row = {"consumer": consumer, "position": 0}
    await upsert(session, tracking, [row], ["consumer"], replace=False)


async def positions(session: AsyncSession, consumers: Sequence[str]) -> dict[str, int]:
    """Return the positions of ``consumers`` in one query (0 for one with none)."""
    rows = await session.execute(
        select(tracking.c.consumer, tracking.c.position).where(tracking.c.consumer.in_(consumers))
    )
    found = {consumer: int(position) for consumer, position in rows}
    return {consumer: found.get(consumer, 0) for consumer in consumers}


async def advance(session: AsyncSession, consumer: str, sequence: int) -> None:
    """Record that ``consumer`` applied everything up to ``sequence`` (same transaction)."""
    await upsert(session, tracking, [{"consumer": consumer, "position": sequence}], ["consumer"])


async def changed(session: AsyncSession, consumer: str, sequence: int) -> None:
    """Record that ``consumer``'s read models changed at ``sequence`` (same transaction)."""
    row = {"consumer": consumer, "sequence": sequence}
    await upsert(session, read_model_versions, [row], ["consumer"])


async def versions(session: AsyncSession, consumers: Sequence[str]) -> dict[str, int]:
    """Return a version of each projection's read models, in one query (0: never changed).

    A projection of a partitioned log changes through each partition's consumer: its version
    is the sum of theirs, which moves whenever any of them moves (each only grows).
    """
    c = read_model_versions.c
    rows = await session.execute(select(c.consumer, c.sequence))
    found = dict.fromkeys(consumers, 0)
    for consumer, sequence in rows:
        for name in {consumer, subjects.base_consumer(consumer)} & found.keys():
            found[name] += int(sequence)
    return found


async def forget(session: AsyncSession, consumers: Sequence[str]) -> None:
    """Drop the positions and versions of these consumers (their models are being rebuilt)."""
    await session.execute(delete(tracking).where(tracking.c.consumer.in_(consumers)))
    c = read_model_versions.c
    await session.execute(delete(read_model_versions).where(c.consumer.in_(consumers)))


async def folded_log(session: AsyncSession, stream: str) -> str | None:
    """Return the creation time of the stream the read models were folded from (None: new)."""
    c = log_identity.c
    value = await session.scalar(select(c.created).where(c.stream == stream))
    return str(value) if value is not None else None


async def stamp_log(session: AsyncSession, stream: str, created: str) -> None:
    """Record that the read models are folded from the stream created at ``created``."""
    await upsert(session, log_identity, [{"stream": stream, "created": created}], ["stream"])
