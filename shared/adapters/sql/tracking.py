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

from memoryd.shared.adapters.sql.tables import log_identity, read_model_versions, tracking
from memoryd.shared.adapters.sql.upsert import upsert


async def position(session: AsyncSession, consumer: str) -> int:
    """Return the last stream sequence ``consumer`` applied (0 if none)."""
    value = await session.scalar(select(tracking.c.position).where(tracking.c.consumer == consumer))
    return int(value or 0)


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
    """Return where each consumer's read models last changed, in one query (0: never)."""
    c = read_model_versions.c
    rows = await session.execute(select(c.consumer, c.sequence).where(c.consumer.in_(consumers)))
    found = {consumer: int(sequence) for consumer, sequence in rows}
    return {consumer: found.get(consumer, 0) for consumer in consumers}


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
