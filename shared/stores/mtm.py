"""The MTM read model: each user's topic segments (state as canonical JSON) and their pages."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import mtm_pages, mtm_segments
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.domain.mtm import Segment

TABLES = (mtm_segments, mtm_pages)


async def load_segments(session: AsyncSession, tenant: str, user_id: str) -> list[Segment]:
    """Return a user's segments."""
    return [Segment.from_json(state) for _, state in await segment_states(session, tenant, user_id)]


async def segment_states(session: AsyncSession, tenant: str, user_id: str) -> list[tuple[str, str]]:
    """Return a user's segments as stored: (segment id, state as canonical JSON)."""
    c = mtm_segments.c
    rows = await session.execute(
        select(c.segment_id, c.state).where(c.tenant == tenant, c.user_id == user_id)
    )
    return [(segment_id, state) for segment_id, state in rows]


async def filed_pages(session: AsyncSession, turn_ids: Collection[uuid.UUID]) -> set[uuid.UUID]:
    """Return which of these pages are in a segment."""
    if not turn_ids:
        return set()
    found = await session.execute(
        select(mtm_pages.c.turn_id).where(mtm_pages.c.turn_id.in_(list(turn_ids)))
    )
    return {turn_id for (turn_id,) in found}


async def round_pages(session: AsyncSession, segment: Segment) -> list[dict[str, Any]]:
    """Return the segment's pages filed since its last promotion, oldest first."""
    rows = await session.execute(
        select(mtm_pages)
        .where(
            mtm_pages.c.segment_id == segment.id,
            mtm_pages.c.promotion_round == segment.promoted_count,
        )
        .order_by(mtm_pages.c.occurred_at, mtm_pages.c.turn_id)
    )
    return [dict(row._mapping) for row in rows]


async def segment_pages(session: AsyncSession, segment_ids: Sequence[str]) -> list[dict[str, Any]]:
    """Return the pages of the given segments (with their base64 vectors)."""
    if not segment_ids:
        return []
    rows = await session.execute(select(mtm_pages).where(mtm_pages.c.segment_id.in_(segment_ids)))
    return [dict(row._mapping) for row in rows]


async def save(
    session: AsyncSession,
    segments: Sequence[dict[str, Any]],
    removed: Sequence[str],
    pages: Sequence[dict[str, Any]],
) -> None:
    """Write changed segment rows and new page rows; delete removed segments and their pages."""
    if removed:
        await session.execute(delete(mtm_pages).where(mtm_pages.c.segment_id.in_(removed)))
        await session.execute(delete(mtm_segments).where(mtm_segments.c.segment_id.in_(removed)))
    await upsert(session, mtm_segments, list(segments), ["segment_id"])
    if pages:
        await session.execute(mtm_pages.insert(), list(pages))
