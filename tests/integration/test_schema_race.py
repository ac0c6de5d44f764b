"""Processes starting at once on a fresh PostgreSQL all create the schema without a race."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

from memoryd.shared.adapters.sql.engine import create_engine
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.adapters.sql.tables import metadata

pytestmark = pytest.mark.integration

STARTING_AT_ONCE = 6


@pytest.fixture
async def fresh_postgres() -> AsyncIterator[str]:
    """Yield the URL of a new, empty PostgreSQL database, dropped afterwards."""
    base = os.environ.get("MEMORYD_TEST_DATABASE_URL")
    if not base or make_url(base).get_backend_name() != "postgresql":
        pytest.skip("no PostgreSQL: set MEMORYD_TEST_DATABASE_URL")
    url = make_url(base)
    name = f"{url.database}_race_{uuid.uuid4().hex[:8]}"
    admin_dsn = url.set(drivername="postgresql", database="postgres").render_as_string(
        hide_password=False
    )
    admin = await asyncpg.connect(admin_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name).render_as_string(hide_password=False)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _start_like_a_process(url: str) -> None:
    engine = create_engine(url)  # a process of its own has its own engine and connections
    try:
        await create_schema(engine)
    finally:
        await engine.dispose()


async def _all_start_and_every_table_exists(url: str) -> None:
    """Start N at the same moment on ``url``: each succeeds, and every table is there."""
    results = await asyncio.gather(
        *(_start_like_a_process(url) for _ in range(STARTING_AT_ONCE)),
        return_exceptions=True,
    )
    assert [None] * STARTING_AT_ONCE == results
    engine = create_engine(url)
    async with engine.connect() as conn:
        tables = await conn.run_sync(lambda sync: set(inspect(sync).get_table_names()))
    await engine.dispose()
    assert set(metadata.tables) <= tables


async def test_concurrent_create_schema_on_a_fresh_database_all_succeed(
    fresh_postgres: str,
) -> None:
    """N start-ups creating the schema at the same moment all succeed; every table exists."""
    await _all_start_and_every_table_exists(fresh_postgres)


async def test_concurrent_create_schema_on_a_fresh_sqlite_file_all_succeed(tmp_path: Path) -> None:
    """The same on SQLite: replicas started together on one file (each its own connection)
    wait for each other's CREATE TABLE instead of failing with "database is locked"."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}"
    for _ in range(5):  # the race is a matter of timing: give it several chances
        (tmp_path / "memoryd.db").unlink(missing_ok=True)
        await _all_start_and_every_table_exists(url)
