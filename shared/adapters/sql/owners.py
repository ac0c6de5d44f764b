"""Delete everything a user owns in a set of read models (every read model names its owner)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Table, delete
from sqlalchemy.ext.asyncio import AsyncSession


async def delete_owned(
    session: AsyncSession, tables: Sequence[Table], tenant: str, user_id: str
) -> int:
    """Delete the rows of ``tables`` that belong to the user; return how many went."""
    gone = 0
    for table in tables:
        owned = (table.c.tenant == tenant) & (table.c.user_id == user_id)
        result = await session.execute(delete(table).where(owned))
        gone += max(result.rowcount or 0, 0)  # type: ignore[attr-defined]
    return gone
