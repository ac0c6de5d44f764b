"""Tests for SqlEmbeddingStore on SQLite and PostgreSQL, and CachedEmbedder over the real model."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from memoryd.shared.adapters.embeddings import (
    CachedEmbedder,
    CacheStats,
    SentenceTransformerEmbedder,
    SqlEmbeddingStore,
    Vectors,
    content_hash,
)
from tests.fakes import CountingEmbedder

POSTGRES_URL = os.environ.get(
    "MEMORYD_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)


@dataclass(frozen=True)
class Database:
    """Where a test's embedding cache lives: a URL and a table name of its own."""

    url: str
    table_name: str

    def engine(self) -> AsyncEngine:
        """Open a fresh engine, as a restarted process would."""
        return create_async_engine(self.url)

    def store(self, engine: AsyncEngine, chunk_size: int = 500) -> SqlEmbeddingStore:
        """Return the store for this database's table on `engine`."""
        return SqlEmbeddingStore(engine, table_name=self.table_name, chunk_size=chunk_size)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    """Give each test an empty cache table on SQLite (tmp file) and on PostgreSQL."""
    if request.param == "sqlite":
        yield Database(f"sqlite+aiosqlite:///{tmp_path / 'cache.db'}", "embedding_cache")
        return
    database = Database(POSTGRES_URL, f"embedding_cache_test_{uuid.uuid4().hex[:10]}")
    engine = database.engine()
    try:
        await database.store(engine).create_schema()
    except OSError as unreachable:
        await engine.dispose()
        pytest.skip(f"PostgreSQL at {POSTGRES_URL} is unreachable: {unreachable}")
    yield database
    async with engine.begin() as connection:
        await connection.run_sync(database.store(engine).metadata.drop_all)
    await engine.dispose()


@pytest.fixture
async def engine(database: Database) -> AsyncIterator[AsyncEngine]:
    """Open an engine on the test database, with the cache table created."""
    engine = database.engine()
    await database.store(engine).create_schema()
    yield engine
    await engine.dispose()


def unit_vector(seed: int) -> Vectors:
    """Return a reproducible random 384-wide unit vector."""
    vector = np.random.default_rng(seed).normal(size=384).astype(np.float32)
    return vector / np.linalg.norm(vector)


async def test_stored_vectors_come_back_bit_for_bit(
    database: Database, engine: AsyncEngine
) -> None:
    """What is stored is returned exactly, and unknown keys are simply absent."""
    store = database.store(engine)
    stored = {content_hash("a"): unit_vector(1), content_hash("b"): unit_vector(2)}
    await store.put_many("model-x", stored)

    found = await store.get_many("model-x", [content_hash("a"), content_hash("b"), "unknown"])

    assert sorted(stored) == sorted(found)
    for key, vector in stored.items():
        assert vector.tobytes() == found[key].tobytes()


async def test_storing_an_existing_key_keeps_the_first_vector(
    database: Database, engine: AsyncEngine
) -> None:
    """A second insert of the same key (a redelivered event) is ignored, not an error."""
    store = database.store(engine)
    key = content_hash("same text")
    await store.put_many("model-x", {key: unit_vector(1)})

    await store.put_many("model-x", {key: unit_vector(2), content_hash("new"): unit_vector(3)})

    found = await store.get_many("model-x", [key, content_hash("new")])
    assert unit_vector(1).tobytes() == found[key].tobytes()
    assert 2 == len(found)


async def test_vectors_are_kept_per_model(database: Database, engine: AsyncEngine) -> None:
    """A vector cached for one model is never served for another."""
    store = database.store(engine)
    await store.put_many("model-x", {content_hash("t"): unit_vector(1)})

    assert {} == await store.get_many("model-y", [content_hash("t")])


async def test_many_keys_span_several_statements(database: Database, engine: AsyncEngine) -> None:
    """More keys than one statement's chunk are all stored and all found."""
    store = database.store(engine, chunk_size=3)
    stored = {content_hash(str(i)): unit_vector(i) for i in range(10)}
    await store.put_many("model-x", stored)

    found = await store.get_many("model-x", list(stored))

    assert sorted(stored) == sorted(found)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    """Share one loaded MiniLM across the module."""
    return SentenceTransformerEmbedder()


TURNS = [
    "I moved to Lisbon in March.",
    "My sister is a nurse in Porto.",
    "I moved to Lisbon in March.",
    "Do you remember my favourite band?",
]


@pytest.mark.model
async def test_a_second_call_makes_no_model_call(
    database: Database, engine: AsyncEngine, minilm: SentenceTransformerEmbedder
) -> None:
    """Texts embedded once are served from the cache, identical, without the model."""
    counting = CountingEmbedder(minilm)
    cache = CachedEmbedder(counting, database.store(engine))
    first = await cache.embed(TURNS)

    second = await cache.embed(TURNS[::-1])

    assert 3 == counting.texts
    assert first[::-1].tobytes() == second.tobytes()
    assert CacheStats(hits=3, misses=3) == cache.stats


@pytest.mark.model
async def test_the_cache_survives_a_restart(
    database: Database, minilm: SentenceTransformerEmbedder
) -> None:
    """A new engine (a restarted process, a replay) finds every vector without the model."""
    before = database.engine()
    await database.store(before).create_schema()
    live = await CachedEmbedder(minilm, database.store(before)).embed(TURNS)
    await before.dispose()

    after = database.engine()
    counting = CountingEmbedder(minilm)
    replayed = await CachedEmbedder(counting, database.store(after)).embed(TURNS)
    await after.dispose()

    assert 0 == counting.texts
    assert live.tobytes() == replayed.tobytes()
