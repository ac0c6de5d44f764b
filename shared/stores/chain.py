"""The STM chain read model: each recent page's continuity verdict and chain summary."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import and_, delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import stm_chain
from memoryd.shared.domain.stm import ConversationKey

TABLES = (stm_chain,)


async def conversation(session: AsyncSession, key: ConversationKey) -> list[dict[str, Any]]:
    """Return a conversation's chain rows, oldest first."""
    result = await session.execute(
        select(stm_chain)
        .where(
            and_(
                stm_chain.c.tenant == key.tenant,
                stm_chain.c.user_id == key.user_id,
                stm_chain.c.agent_id == key.agent_id,
            )
        )
        .order_by(stm_chain.c.stream_seq)
    )
    return [dict(row._mapping) for row in result]


async def save(
    session: AsyncSession,
    gone: Iterable[uuid.UUID],
    fresh: Sequence[Mapping[str, Any]],
    changed: Sequence[Mapping[str, Any]],
) -> None:
    """Delete rows beyond capacity, insert new rows, update the verdict of changed ones."""
    gone = list(gone)
    if gone:
        await session.execute(delete(stm_chain).where(stm_chain.c.turn_id.in_(gone)))
    if fresh:
        await session.execute(stm_chain.insert(), [dict(row) for row in fresh])
    for row in changed:
        await session.execute(
            update(stm_chain)
            .where(stm_chain.c.turn_id == row["turn_id"])
            .values(linked=row["linked"], meta_chain=row["meta_chain"])
        )


async def meta_chains(session: AsyncSession, turn_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Return the chain summary of each of these pages that has one."""
    if not turn_ids:
        return {}
    rows = await session.execute(
        select(stm_chain.c.turn_id, stm_chain.c.meta_chain).where(
            stm_chain.c.turn_id.in_(list(turn_ids))
        )
    )
    return {row.turn_id: row.meta_chain for row in rows}
