"""Scratch storage for a fold that must not touch the live read models (``memoryd verify``).

The scratch database has the live one's backend, so both fingerprint alike: a SQLite file in
a temporary folder, or a PostgreSQL schema of its own in the live database (dropped after).
The scratch index is a Qdrant Edge shard in the temporary folder.
"""

from __future__ import annotations

import tempfile
import uuid
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memoryd.shared.adapters.index import SearchIndex, build_index
from memoryd.shared.adapters.sql.engine import create_engine, session_factory


@dataclass(frozen=True, slots=True)
class ScratchStorage:
    """A scratch database and index, removed when the exit stack closes."""

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    index: SearchIndex


async def open_scratch(live_url: str, dimension: int, exit_stack: AsyncExitStack) -> ScratchStorage:
    """Open scratch storage beside the live database ``live_url``."""
    folder = Path(exit_stack.enter_context(tempfile.TemporaryDirectory(prefix="memoryd-")))
    engine = await _scratch_engine(live_url, folder, exit_stack)
    index = build_index(None, folder / "index", dimension)
    await index.ensure_collection()
    exit_stack.push_async_callback(index.close)
    return ScratchStorage(engine, session_factory(engine), index)


async def _scratch_engine(live_url: str, folder: Path, exit_stack: AsyncExitStack) -> AsyncEngine:
    url = make_url(live_url)
    if url.get_backend_name() == "sqlite":
        engine = create_engine(f"sqlite+aiosqlite:///{folder / 'scratch.db'}")
        exit_stack.push_async_callback(engine.dispose)
        return engine
    schema = f"memoryd_scratch_{uuid.uuid4().hex[:12]}"
    admin = create_engine(live_url)
    async with admin.begin() as conn:
        await conn.execute(text(f'CREATE SCHEMA "{schema}"'))

    async def drop_schema() -> None:
        async with admin.begin() as conn:
            await conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()

    exit_stack.push_async_callback(drop_schema)
    engine = create_engine(live_url, search_path=schema)
    exit_stack.push_async_callback(engine.dispose)
    return engine
