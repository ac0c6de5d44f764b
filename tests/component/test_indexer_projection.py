"""The indexer projection and retention sweep against real MiniLM, Qdrant Edge and SQLite."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memoryd.services.bootstrap import build_model
from memoryd.services.indexer import projection as indexer_projection
from memoryd.services.indexer.items import KeyOptions, composed
from memoryd.services.indexer.projection import IndexerProjection
from memoryd.services.indexer.retention import due_expiries
from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.runtime.projection import Positioned
from memoryd.shared.adapters.embeddings import CachedEmbedder, Embedder, SqlEmbeddingStore
from memoryd.shared.adapters.index import EdgeSearchIndex, IndexPoint, ScopeFilter
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.contracts.events import (
    Category,
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.memories import memory_identity
from memoryd.shared.settings import Settings
from tests.fakes import CountingEmbedder

EdgeIndex = TypeVar("EdgeIndex", bound=EdgeSearchIndex)

pytestmark = pytest.mark.model

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)
ALICE = Scope(tenant="acme", user_id="alice", session_id="s1")
MINE = ScopeFilter(tenant="acme", user_id="alice")


@pytest.fixture(scope="session")
def minilm() -> Embedder:
    """Load the real MiniLM once per test session."""
    return build_model(Settings())


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    """Yield a fresh SQLite database with the read models."""
    created = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}")
    await create_schema(created)
    yield created
    await created.dispose()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqlEmbeddingStore]:
    """Yield the embedding cache in its own SQLite file, as the stack keeps it (see bootstrap)."""
    created = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'embeddings.db'}")
    cache = SqlEmbeddingStore(created)
    await cache.create_schema()
    yield cache
    await created.dispose()


async def opened(index: EdgeIndex) -> EdgeIndex:
    """Open the index (create its folder) and return it."""
    await index.ensure_collection()
    return index


async def apply(
    sessions: async_sessionmaker[AsyncSession],
    projection: object,
    events: Sequence[Event],
    live: bool = True,
) -> None:
    batch = [Positioned(event, n + 1) for n, event in enumerate(events)]  # type: ignore[arg-type]
    async with sessions() as session, session.begin():
        await projection.apply(session, batch, live)  # type: ignore[attr-defined]


def remember(content: str, key: str, category: Category = Category.CORE) -> MemoryRemembered:
    return MemoryRemembered(
        occurred_at=T0,
        scope=ALICE,
        memory_id=uuid.uuid4(),
        key=key,
        content=content,
        category=category,
    )


async def test_items_are_searchable_then_forgotten_and_replay_needs_no_model(
    tmp_path: Path, engine: AsyncEngine, store: SqlEmbeddingStore, minilm: Embedder
) -> None:
    """Indexed items are found by both streams; forget and session end remove them; replay
    rebuilds a fresh index from the SQL embedding cache without running the model."""
    sessions = session_factory(engine)
    counting = CountingEmbedder(minilm)
    index = await opened(EdgeSearchIndex(tmp_path / "index", 384))
    projection = IndexerProjection(index, CachedEmbedder(counting, store))
    tea = remember("I drink green tea every morning.", "drink")
    draft = remember("Draft reply to the landlord.", "draft", Category.CONVERSATION)
    turn = TurnRecorded(occurred_at=T0, scope=ALICE, query="Moved to Berlin.", response="Ok!")
    events: list[Event] = [tea, draft, turn]
    await apply(sessions, projection, events)

    assert 3 == await index.count(MINE)
    dense = await index.search_dense((await minilm.embed(["morning tea"]))[0], MINE, 1)
    assert "drink: I drink green tea every morning." == dense[0].text
    assert "Moved to Berlin.\nOk!" == (await index.search_sparse("Berlin", MINE, 1))[0].text

    ended = SessionEnded(occurred_at=T0, scope=ALICE)
    forgot = MemoryForgotten(occurred_at=T0, scope=ALICE, memory_id=memory_identity(tea))
    await apply(sessions, projection, [forgot, ended])
    events += [forgot, ended]
    assert ["Moved to Berlin.\nOk!"] == [
        h.text for h in await index.search_sparse("tea draft Berlin", MINE, 5)
    ]
    await index.close()

    embedded = counting.texts
    rebuilt = await opened(EdgeSearchIndex(tmp_path / "rebuilt", 384))
    replaying = IndexerProjection(rebuilt, CachedEmbedder(counting, store))
    async with sessions() as session, session.begin():
        # Replay starts the indexer's own read models afresh (see runtime.replay).
        for table in IndexerProjection.tables:
            await session.execute(delete(table))
    await apply(sessions, replaying, events, live=False)
    assert embedded == counting.texts
    assert 1 == await rebuilt.count(MINE)
    await rebuilt.close()


async def test_a_daily_memory_expires_once_after_its_ttl(
    tmp_path: Path, engine: AsyncEngine, store: SqlEmbeddingStore, minilm: Embedder
) -> None:
    """After 30 days the sweep emits one expiry; once folded, the sweep emits none again."""
    sessions = session_factory(engine)
    index = await opened(EdgeSearchIndex(tmp_path / "index", 384))
    indexer = IndexerProjection(index, CachedEmbedder(minilm, store))
    daily = remember("Dentist at 3pm today.", "today", Category.DAILY)
    core = remember("Allergic to peanuts.", "allergy")
    await apply(sessions, MemoriesProjection(30), [daily, core])
    await apply(sessions, indexer, [daily, core])
    async with sessions() as session:
        assert [] == await due_expiries(session, T0 + timedelta(days=29))
        [expiry] = await due_expiries(session, T0 + timedelta(days=30))
    assert (memory_identity(daily), daily.event_id) == (expiry.memory_id, expiry.source_event_id)

    await apply(sessions, indexer, [expiry])

    async with sessions() as session:
        assert [] == await due_expiries(session, T0 + timedelta(days=31))
    assert ["allergy: Allergic to peanuts."] == [
        h.text for h in await index.search_sparse("dentist peanuts", MINE, 5)
    ]
    await index.close()


async def test_a_composed_window_costs_no_model_call_and_replays_to_the_same_vector(
    tmp_path: Path, engine: AsyncEngine, store: SqlEmbeddingStore, minilm: Embedder
) -> None:
    """With composed windows the model embeds the two turns, never their window; the window
    point's vector is their composition, live and rebuilt from the cache alike."""
    sessions = session_factory(engine)
    counting = CountingEmbedder(minilm)
    keys = KeyOptions(composed_windows=True)
    question = TurnRecorded(occurred_at=T0, scope=ALICE, query="How often do you run?", response="")
    reply = TurnRecorded(
        occurred_at=T0, scope=ALICE, query="", response="Twice a week, by the river."
    )
    parts = ("How often do you run?", "Twice a week, by the river.")
    expected = composed(list(await minilm.embed(parts)), parts)
    found = []
    for folder, live in (("live", True), ("rebuilt", False)):
        index = await opened(EdgeSearchIndex(tmp_path / folder, 384))
        projection = IndexerProjection(index, CachedEmbedder(counting, store), keys)
        async with sessions() as session, session.begin():
            for table in IndexerProjection.tables:
                await session.execute(delete(table))
        await apply(sessions, projection, [question, reply], live)
        found.append(await index.search_dense(expected, MINE, 1))
        await index.close()

    assert sorted(parts) == sorted(counting.asked)
    for [hit] in found:
        assert "How often do you run?\nTwice a week, by the river." == hit.text
        assert hit.score == pytest.approx(1.0, abs=1e-5)


async def test_a_window_joining_the_last_batch_is_embedded_before_the_transaction(
    tmp_path: Path, engine: AsyncEngine, store: SqlEmbeddingStore, minilm: Embedder
) -> None:
    """The window that joins a batch's first turn to the previous batch's last one is
    embedded by ``warm``: the transaction, holding the write lock, does not call the model."""
    sessions = session_factory(engine)
    counting = CountingEmbedder(minilm)
    index = await opened(EdgeSearchIndex(tmp_path / "index", 384))
    projection = IndexerProjection(index, CachedEmbedder(counting, store))
    question = TurnRecorded(occurred_at=T0, scope=ALICE, query="How often do you run?", response="")
    reply = TurnRecorded(
        occurred_at=T0, scope=ALICE, query="Twice a week, by the river.", response=""
    )
    await projection.warm([question])
    await apply(sessions, projection, [question])

    await projection.warm([reply])
    warmed = list(counting.asked)
    await apply(sessions, projection, [reply])

    assert "How often do you run?\nTwice a week, by the river." in warmed
    assert warmed == counting.asked  # the transaction asked the model nothing
    window = "How often do you run?\nTwice a week, by the river."
    [hit] = await index.search_dense((await minilm.embed([window]))[0], MINE, 1)
    assert window == hit.text
    await index.close()


class WritesCounted(EdgeSearchIndex):
    """The Edge index, counting the points replay's writes report as written."""

    written = 0

    async def upsert_changed(self, points: Sequence[IndexPoint]) -> int:
        written = await super().upsert_changed(points)
        self.written += written
        return written


async def test_replay_onto_the_index_it_built_writes_only_what_is_missing(
    tmp_path: Path, engine: AsyncEngine, store: SqlEmbeddingStore, minilm: Embedder
) -> None:
    """Replay folds the log into the index the live pass built: the points it holds as the
    log gives them are not written again; a point lost meanwhile is written back."""
    sessions = session_factory(engine)
    index = await opened(WritesCounted(tmp_path / "index", 384))
    projection = IndexerProjection(index, CachedEmbedder(minilm, store))
    turns = [
        TurnRecorded(occurred_at=T0, scope=ALICE, query=f"Day {n}: a walk.", response="")
        for n in range(6)
    ]
    events: list[Event] = [*turns, remember("I drink green tea every morning.", "drink")]
    await apply(sessions, projection, events)
    held = await index.count(MINE)
    lost = (await index.search_sparse("tea", MINE, 1))[0]

    for missing in ([], [lost.id]):
        await index.delete(missing)
        async with sessions() as session, session.begin():
            for table in IndexerProjection.tables:
                await session.execute(delete(table))
        index.written = 0
        await apply(sessions, projection, events, live=False)
        assert len(missing) == index.written
        assert held == await index.count(MINE)
    assert lost.text == (await index.search_sparse("tea", MINE, 1))[0].text
    await index.close()


@pytest.fixture
def chunks_of_two(monkeypatch: pytest.MonkeyPatch) -> None:
    """Have the indexer plan and write a batch two events at a time."""
    monkeypatch.setattr(indexer_projection, "WRITE_CHUNK", 2)


async def _held(index: EdgeSearchIndex) -> dict[uuid.UUID, str]:
    """Return every point the index holds: id -> text."""
    points, _ = await index.scroll(None, 1_000)
    return {point.id: point.text for point in points}


def _remembered_and_forgotten() -> list[Event]:
    """Turns with a memory remembered, forgotten and remembered again under one key."""
    first, again = remember("I drink green tea.", "drink"), remember("I drink coffee.", "drink")
    forgot, forgot_again = (
        MemoryForgotten(occurred_at=T0, scope=ALICE, key="drink") for _ in range(2)
    )
    turns = [
        TurnRecorded(occurred_at=T0, scope=ALICE, query=f"Ok {n}.", response=f"Noted, day {n}.")
        for n in range(5)
    ]
    return [turns[0], first, turns[1], forgot, turns[2], again, turns[3], forgot_again, turns[4]]


@pytest.mark.usefixtures("chunks_of_two")
async def test_a_batch_written_in_chunks_ends_as_event_by_event(
    tmp_path: Path, engine: AsyncEngine, store: SqlEmbeddingStore, minilm: Embedder
) -> None:
    """A batch longer than a chunk writes each chunk while planning the next: the index
    ends as applying the events one at a time leaves it (a forget after its remember in
    the next chunk removes it; windows join turns across chunks)."""
    sessions = session_factory(engine)
    events = _remembered_and_forgotten()
    chunked = await opened(EdgeSearchIndex(tmp_path / "chunked", 384))
    await apply(sessions, IndexerProjection(chunked, CachedEmbedder(minilm, store)), events)
    async with sessions() as session, session.begin():
        for table in IndexerProjection.tables:
            await session.execute(delete(table))
    one_by_one = await opened(EdgeSearchIndex(tmp_path / "one", 384))
    projection = IndexerProjection(one_by_one, CachedEmbedder(minilm, store))
    for event in events:
        await apply(sessions, projection, [event])

    held = await _held(chunked)
    assert await _held(one_by_one) == held
    assert not any("drink:" in text for text in held.values())  # forgotten twice, in order
    assert "Ok 1.\nNoted, day 1.\nOk 2.\nNoted, day 2." in held.values()  # a window
    await chunked.close()
    await one_by_one.close()


class FailsToDelete(EdgeSearchIndex):
    """The Edge index, refusing every delete by id."""

    async def delete(self, ids: Sequence[uuid.UUID]) -> None:
        raise RuntimeError("the index refused a delete")


@pytest.mark.usefixtures("chunks_of_two")
async def test_a_failed_chunk_fails_the_batch_with_its_error_and_writes_nothing_after(
    tmp_path: Path, engine: AsyncEngine, store: SqlEmbeddingStore, minilm: Embedder
) -> None:
    """The batch raises the index's own error (the runner retries or parks it by that), and
    the chunks after the failed one leave the index as it was."""
    sessions = session_factory(engine)
    index = await opened(FailsToDelete(tmp_path / "index", 384))
    events = _remembered_and_forgotten()
    with pytest.raises(RuntimeError, match="refused a delete"):
        await apply(sessions, IndexerProjection(index, CachedEmbedder(minilm, store)), events)
    # The first chunk and the second's turn (its delete failed); nothing of the later chunks.
    assert {
        "Ok 0.\nNoted, day 0.",
        "drink: I drink green tea.",
        "Ok 1.\nNoted, day 1.",
        "Ok 0.\nNoted, day 0.\nOk 1.\nNoted, day 1.",
    } == set((await _held(index)).values())
    await index.close()
