"""Read-only sessions (recall's, the listings') run their statements in autocommit.

A reader holds no transaction between its statements: each reads what is committed when it
runs. Before, a SQLite reader began a deferred transaction, so its later statements read the
snapshot of its first, and every session paid a BEGIN and a ROLLBACK through aiosqlite's
thread (docs/performance.md, session 46).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from memoryd.shared.adapters.sql.engine import create_engine, read_only, session_factory


@pytest.fixture
async def engines(database_url: str) -> AsyncIterator[tuple[AsyncEngine, AsyncEngine, str]]:
    """Yield the writers' engine, the readers' over it, and a scratch table of one row."""
    engine = create_engine(database_url)
    readers = read_only(engine)
    table = f"readers_{uuid.uuid4().hex[:12]}"
    async with session_factory(engine)() as session, session.begin():
        await session.execute(text(f"CREATE TABLE {table} (n INTEGER)"))
        await session.execute(text(f"INSERT INTO {table} VALUES (1)"))
    yield engine, readers, table
    async with session_factory(engine)() as session, session.begin():
        await session.execute(text(f"DROP TABLE {table}"))
    if readers.sync_engine.pool is not engine.sync_engine.pool:
        await readers.dispose()
    await engine.dispose()


async def test_a_readers_next_statement_sees_what_was_committed_since_its_first(
    engines: tuple[AsyncEngine, AsyncEngine, str],
) -> None:
    engine, readers, table = engines
    count = text(f"SELECT count(*) FROM {table}")
    async with session_factory(readers, writer=False)() as reader:
        assert (await reader.execute(count)).scalar_one() == 1
        async with session_factory(engine)() as writer, writer.begin():
            await writer.execute(text(f"INSERT INTO {table} VALUES (2)"))
        # In a transaction begun by the first read, SQLite would still answer 1 here.
        assert (await reader.execute(count)).scalar_one() == 2


async def test_a_reader_holds_no_transaction_open(
    engines: tuple[AsyncEngine, AsyncEngine, str],
) -> None:
    engine, readers, table = engines
    async with session_factory(readers, writer=False)() as reader:
        if readers.dialect.name == "sqlite":
            await reader.execute(text(f"SELECT n FROM {table}"))
            raw = await (await reader.connection()).get_raw_connection()
            # sqlite3's own flag: no BEGIN was issued on the connection.
            assert raw.driver_connection._conn.in_transaction is False  # type: ignore[union-attr]
        else:
            pid = (await reader.execute(text("SELECT pg_backend_pid()"))).scalar_one()
            async with session_factory(engine)() as other:
                state = await other.execute(
                    text("SELECT state FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
                )
                # Not "idle in transaction": the server holds no snapshot for the reader.
                assert state.scalar_one() == "idle"


async def test_readers_of_a_database_in_memory_see_the_writers_tables() -> None:
    engine = create_engine("sqlite+aiosqlite://")
    readers = read_only(engine)
    async with session_factory(engine)() as session, session.begin():
        await session.execute(text("CREATE TABLE kept (n INTEGER)"))
        await session.execute(text("INSERT INTO kept VALUES (7)"))
    async with session_factory(readers, writer=False)() as reader:
        assert (await reader.execute(text("SELECT n FROM kept"))).scalar_one() == 7
    await engine.dispose()
