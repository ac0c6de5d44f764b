"""Recall's read cache on SQLite: state is read again exactly when its writer moved."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.recall.cache import ReadCache
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """Yield sessions on a fresh SQLite file with the schema created."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'cache.db'}")
    await create_schema(engine)
    yield session_factory(engine)
    await engine.dispose()


async def test_state_is_loaded_again_only_after_its_consumer_moves(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Two reads at one position load once; a write by the consumer loads again."""
    cache = ReadCache()
    loads: list[int] = []

    async def load(session: AsyncSession) -> int:
        loads.append(1)
        return len(loads)

    async with sessions() as session:
        first = await cache.read(session, "memoryd-mtm", "anna", load)
        second = await cache.read(session, "memoryd-mtm", "anna", load)
    async with sessions() as session, session.begin():
        await tracking.advance(session, "memoryd-mtm", 7)
    async with sessions() as session:
        third = await cache.read(session, "memoryd-mtm", "anna", load)
        other_writer = await cache.read(session, "memoryd-graph", "anna", load)

    assert (1, 1, 2, 3) == (first, second, third, other_writer)


async def test_the_least_recently_used_value_is_dropped_over_capacity(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A bounded cache keeps the values used last."""
    cache = ReadCache(max_entries=2)

    async def load(session: AsyncSession) -> str:
        return "state"

    async with sessions() as session:
        for user in ("anna", "bob", "anna", "carl"):
            await cache.read(session, "memoryd-mtm", user, load)

    assert 2 == len(cache)


async def test_positions_are_read_in_one_query_zero_for_a_consumer_without_one(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The tiers read their writers' positions together; an unknown consumer is at 0."""
    async with sessions() as session, session.begin():
        await tracking.advance(session, "memoryd-mtm", 7)
    async with sessions() as session:
        found = await tracking.positions(session, ("memoryd-mtm", "memoryd-persona"))

    assert {"memoryd-mtm": 7, "memoryd-persona": 0} == found
