"""Async SQLAlchemy engines for SQLite (embedded) and PostgreSQL (production)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the recall service read while a worker writes; busy_timeout makes the workers
    # of one process wait for each other instead of failing with "database is locked".
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def create_engine(url: str) -> AsyncEngine:
    """Create the async engine for ``url``, preparing SQLite's file and pragmas."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_async_engine(url)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=True)


def session_factory(engine: AsyncEngine) -> async_sessionmaker:  # type: ignore[type-arg]
    """Return the session factory every worker and the recall service use."""
    return async_sessionmaker(engine, expire_on_commit=False)
