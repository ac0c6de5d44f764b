"""Async SQLAlchemy engines for SQLite (embedded) and PostgreSQL (production)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event, text
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

WRITER = "memoryd_writer"
T = TypeVar("T")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the recall service read while a worker writes; busy_timeout makes the workers
    # of one process wait for each other instead of failing with "database is locked".
    # isolation_level=None hands BEGIN to _sqlite_begin below.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=60000")
    _switch_to_wal(cursor)
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def _switch_to_wal(cursor: Any, attempts: int = 100) -> None:
    """Put the file in WAL mode (it stays so), waiting out another connection's lock.

    Switching a fresh file takes an exclusive lock and SQLite does not call the busy handler
    for it: replicas starting together on a new file failed at once with "database is locked"
    (test_schema_race, about one round in ten). Up to ~5 s of short waits, then the error.
    """
    for attempt in range(attempts):
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except Exception as error:  # the adapted driver's OperationalError
            if "locked" not in str(error) or attempt == attempts - 1:
                raise
            time.sleep(0.05)


def _sqlite_begin(connection: Any) -> None:
    # A deferred transaction that reads, then writes, fails at once with "database is locked"
    # when another connection wrote in between (busy_timeout does not apply to that upgrade),
    # so a whole batch would fail and be retried event by event. Writers take the write lock
    # up front and queue on busy_timeout instead; readers stay deferred and never wait.
    writer = connection.get_execution_options().get(WRITER, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")


def create_engine(url: str, *, search_path: str | None = None) -> AsyncEngine:
    """Create the async engine for ``url``, preparing SQLite's file and pragmas.

    ``search_path`` (PostgreSQL) puts every table in that schema, e.g. a scratch fold's.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if sqlite_file(parsed) and parsed.database:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        event.listen(engine.sync_engine, "begin", _sqlite_begin)
        return engine
    connect_args = {"server_settings": {"search_path": search_path}} if search_path else {}
    return create_async_engine(
        url, pool_size=10, max_overflow=10, pool_pre_ping=True, connect_args=connect_args
    )


def read_only(engine: AsyncEngine) -> AsyncEngine:
    """Return an engine for read-only sessions over ``engine``'s database, opened in
    autocommit: no transaction around a session's statements, each reading what is committed
    when it runs (what PostgreSQL's READ COMMITTED gave each of them already).

    A transaction costs a reader two more hand-offs a session for nothing it needs: the BEGIN
    and the ROLLBACK at its close, each a trip to aiosqlite's thread and back on a SQLite file
    (0.41 ms of wall a BEGIN in a user's first recall, ~8 sessions; docs/performance.md,
    session 46) and a round trip to PostgreSQL. A SQLite file gets an engine of its own whose
    connections never begin one and skip the rollback (``skip_autocommit_rollback``); the
    writers' engine keeps both. A database in memory is only seen through ``engine`` itself,
    which is returned as it is. An engine with a pool of its own is the caller's to dispose of.
    """
    if engine.dialect.name != "sqlite":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    if not sqlite_file(engine.url):
        return engine
    readers = create_async_engine(engine.url, skip_autocommit_rollback=True)
    event.listen(readers.sync_engine, "connect", _sqlite_pragmas)
    return readers


def session_factory(engine: AsyncEngine, *, writer: bool = True) -> async_sessionmaker:  # type: ignore[type-arg]
    """Return a session factory; ``writer=False`` for read-only callers such as recall."""
    # Writers' transactions take SQLite's write lock first (see _sqlite_begin).
    bind = engine.execution_options(**{WRITER: True}) if writer else engine
    return async_sessionmaker(bind, expire_on_commit=False)


async def sql_error(sessions: async_sessionmaker[AsyncSession]) -> str | None:
    """Return why the database does not answer a trivial query (None: it answers)."""
    try:
        async with sessions() as session:
            await session.execute(text("SELECT 1"))
    except Exception as error:  # any failure is the answer, named by its type
        return type(error).__name__
    return None


class LoopReadBusy(Exception):
    """The SQLite file was locked when a read on the event loop asked: read it another way."""


class LoopReads:
    """Short reads of a SQLite file, made on the event loop in one call.

    Through the async driver (aiosqlite) every step of a read is a hand-off to its thread and
    back: a session that reads one row made nine, 1.2-4.0 ms of wall here, against 0.1 ms for
    the same read made here at once (docs/performance.md, session 38). In WAL mode a reader
    never waits for a writer, so a short read does not hold the loop; one that finds the file
    locked (SQLite's recovery after a crash, a change of journal mode) gives up at once (busy
    timeout 0) and raises ``LoopReadBusy``, for the caller to read through the async driver,
    which waits. Only for reads that touch a few rows: through the driver, SQLite's own work
    runs in its thread beside the loop (sqlite3 releases the GIL), and here it stops every
    request. The graph stream's read of up to 200 items by key, moved here, took 50 callers
    from 94.9 to 87.7 recalls/s (means of four and five runs, session 38): it stayed.
    """

    def __init__(self, url: str) -> None:
        """Read the SQLite file of ``url`` (an async URL: its driver is swapped for sqlite3)."""
        self._engine: Engine = create_sync_engine(make_url(url).set(drivername="sqlite"))
        event.listen(self._engine, "connect", _loop_reader_pragmas)

    def run(self, read: Callable[[Connection], T]) -> T:
        """Return ``read(connection)``; raise ``LoopReadBusy`` if the file was locked."""
        try:
            with self._engine.connect() as connection:
                return read(connection)
        except OperationalError as error:
            if "locked" in str(error) or "busy" in str(error):
                raise LoopReadBusy(str(error)) from error
            raise

    async def dispose(self) -> None:
        """Close the connection."""
        self._engine.dispose()


def sqlite_file(url: str | URL) -> bool:
    """Say whether ``url`` names a SQLite database in a file (not one in memory)."""
    parsed = make_url(url)
    in_memory = parsed.database in (None, "", ":memory:") or "memory" in str(parsed.query)
    return parsed.get_backend_name() == "sqlite" and not in_memory


def loop_reads(url: str) -> LoopReads | None:
    """Return reads on the event loop for a SQLite file (None: another database, whose async
    driver makes one round trip a statement, or a database in memory, which another
    connection would not see)."""
    return LoopReads(url) if sqlite_file(url) else None


def _loop_reader_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # Autocommit (each statement reads the newest commit), no waiting, and never a write.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.execute("PRAGMA query_only=1")
    cursor.close()
