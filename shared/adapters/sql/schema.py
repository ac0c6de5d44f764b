"""Create, drop and fingerprint the read models."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import MetaData, Table, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from memoryd.shared.adapters.sql.engine import WRITER
from memoryd.shared.adapters.sql.tables import READ_MODELS, metadata, tracking

# Any fixed 64-bit number: every memoryd process takes the same lock to create tables.
SCHEMA_LOCK = 0x6D656D6F727964  # "memoryd"


async def create_schema(engine: AsyncEngine, tables: MetaData = metadata) -> None:
    """Create every table of ``tables`` (the read models) that does not exist yet.

    Processes starting together on a fresh PostgreSQL would race (both see no table, both
    create its row type, one dies on pg_type's unique index), so PostgreSQL creates under a
    transaction-scoped advisory lock: the second waits, then finds the tables. On SQLite the
    transaction takes the write lock up front (a deferred one that read the catalogue, then
    created a table, failed at once with "database is locked" beside another replica).
    """
    async with engine.execution_options(**{WRITER: True}).begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SCHEMA_LOCK})
        await conn.run_sync(tables.create_all)


async def missing_columns(engine: AsyncEngine, tables: MetaData = metadata) -> list[str]:
    """Return ``table.column`` for each column the models define that the database lacks.

    ``create_schema`` creates missing tables but never alters one: a read model made by an
    older memoryd keeps its old shape until ``memoryd replay`` drops and rebuilds it.
    """

    def missing(sync: Any) -> list[str]:
        found = inspect(sync)
        gaps = []
        for table in tables.sorted_tables:
            if not found.has_table(table.name):
                continue
            held = {column["name"] for column in found.get_columns(table.name)}
            gaps += [f"{table.name}.{c.name}" for c in table.columns if c.name not in held]
        return gaps

    async with engine.connect() as conn:
        return await conn.run_sync(missing)


async def drop_read_models(engine: AsyncEngine) -> None:
    """Drop every read model and the bookkeeping tables (tracking, ledger): a clean slate."""
    async with engine.begin() as conn:
        await conn.run_sync(metadata.drop_all)


def _canonical(value: Any) -> Any:
    # SQLite hands datetimes back naive; normalise so both backends fingerprint alike.
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).isoformat()
    if isinstance(value, float):
        return round(value, 9)
    return value


async def table_checksum(engine: AsyncEngine, table: Table) -> str:
    """Return a sha256 of a table's rows in primary-key order."""
    digest = hashlib.sha256()
    order = list(table.primary_key.columns)
    async with engine.connect() as conn:
        result = await conn.stream(select(table).order_by(*order))
        async for row in result:
            canonical = {key: _canonical(value) for key, value in row._mapping.items()}
            digest.update(json.dumps(canonical, sort_keys=True, default=str).encode())
    return digest.hexdigest()


async def read_model_checksums(
    engine: AsyncEngine, tables: Sequence[Table] = READ_MODELS
) -> dict[str, str]:
    """Return table name -> checksum for each read model (every one by default)."""
    return {table.name: await table_checksum(engine, table) for table in tables}


__all__ = [
    "create_schema",
    "drop_read_models",
    "missing_columns",
    "read_model_checksums",
    "tracking",
]
