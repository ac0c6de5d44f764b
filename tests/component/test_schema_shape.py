"""Read models made by an older memoryd are told apart (a column missing), on SQLite."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from memoryd.shared.adapters.sql.engine import create_engine
from memoryd.shared.adapters.sql.schema import create_schema, missing_columns


async def test_a_table_made_before_a_column_was_added_is_named(tmp_path: Path) -> None:
    """index_last_turns made without user_id: that column is named; a fresh schema has none."""
    old = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}")
    async with old.begin() as conn:
        await conn.execute(
            text(
                "CREATE TABLE index_last_turns (conversation_id CHAR(32) PRIMARY KEY, "
                "tenant VARCHAR(64) NOT NULL, text TEXT NOT NULL)"
            )
        )
    await create_schema(old)  # creates what is missing, alters nothing
    fresh = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}")
    await create_schema(fresh)

    assert ["index_last_turns.user_id"] == await missing_columns(old)
    assert [] == await missing_columns(fresh)
    await old.dispose()
    await fresh.dispose()
