"""Insert-or-update that works on both SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession


async def upsert(
    session: AsyncSession,
    table: Table,
    rows: Sequence[dict[str, Any]],
    key: Sequence[str],
    *,
    replace: bool = True,
) -> None:
    """Insert ``rows``, replacing every non-key column of rows whose ``key`` exists (or,
    with ``replace=False``, keeping those rows as they are)."""
    if not rows:
        return
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(table)
    updates = {name: statement.excluded[name] for name in rows[0] if name not in key and replace}
    if updates:
        statement = statement.on_conflict_do_update(index_elements=list(key), set_=updates)
    else:
        statement = statement.on_conflict_do_nothing(index_elements=list(key))
    await session.execute(statement, list(rows))
