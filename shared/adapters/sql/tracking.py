"""Tracking rows: which stream sequence each projection has applied."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import tracking
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


async def forget(session: AsyncSession, consumers: Sequence[str]) -> None:
    """Drop the positions of these consumers (their read models are being rebuilt)."""
    await session.execute(delete(tracking).where(tracking.c.consumer.in_(consumers)))
