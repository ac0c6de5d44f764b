"""Recall's read cache on SQLite: state is read again exactly when its writer changed it, a
user's state when their own rows changed."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest
from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.recall.cache import (
    ReadCache,
    RowsByKey,
    VersionFeed,
    VersionReads,
    Versions,
)
from memoryd.services.runtime.projection import Positioned, apply_once
from memoryd.shared import subjects
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.adapters.sql.engine import (
    LoopReadBusy,
    create_engine,
    loop_reads,
    session_factory,
)
from memoryd.shared.adapters.sql.schema import create_schema, drop_read_models
from memoryd.shared.adapters.sql.tables import memories
from memoryd.shared.contracts.events import Category, MemoryRemembered, TurnRecorded
from memoryd.shared.contracts.scope import Scope, SearchScope
from memoryd.shared.stores import memories as memories_store

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="anna")


def remembered(user: str, content: str) -> MemoryRemembered:
    """Return a lasting memory of ``user`` (tenant acme)."""
    return MemoryRemembered(
        occurred_at=T0, scope=Scope(tenant="acme", user_id=user), content=content
    )


class Recall:
    """What recall does with its cache: read the versions, settle, then a user's memories."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], cache: ReadCache) -> None:
        self.sessions, self.cache, self.feed = sessions, cache, VersionFeed()
        self.loads: list[str] = []

    async def memories(self, user: str, wide: SearchScope = SearchScope.USER) -> list[str]:
        """Return ``user``'s memories as recall holds them (loading when it must)."""
        at = await self.feed.read(self.sessions)
        self.cache.settle(at)
        scope = Scope(tenant="acme", user_id=user)
        owner = (scope.tenant, None if wide is SearchScope.GLOBAL else user)

        async def load(session: AsyncSession) -> list[dict[str, object]]:
            self.loads.append(user)
            return await memories_store.in_scope(session, scope, wide)

        rows = await self.cache.held(
            self.sessions, MEMORIES, ("memories", scope, wide), load, at, user=owner
        )
        return sorted(str(row["content"]) for row in rows)


MEMORIES = MemoriesProjection.consumer


async def test_a_users_state_is_loaded_again_after_their_change_not_another_users(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Bob's writes leave Anna's held memories standing; Anna's own write reloads them."""
    projection, recall = MemoriesProjection(daily_ttl_days=1), Recall(sessions, ReadCache())
    await apply_once(sessions, projection, [Positioned(remembered("anna", "likes tea"), 1)], None)

    first = await recall.memories("anna")
    await apply_once(sessions, projection, [Positioned(remembered("bob", "likes chess"), 2)], None)
    after_bob = await recall.memories("anna")
    await apply_once(sessions, projection, [Positioned(remembered("anna", "has a cat"), 3)], None)
    after_anna = await recall.memories("anna")

    assert ["likes tea"] == first == after_bob
    assert ["has a cat", "likes tea"] == after_anna
    assert ["anna", "anna"] == recall.loads


async def test_a_tenant_wide_value_is_loaded_again_after_any_users_change(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A global search reads every user's memories: Bob's write reloads Anna's global view."""
    projection, recall = MemoriesProjection(daily_ttl_days=1), Recall(sessions, ReadCache())
    await apply_once(sessions, projection, [Positioned(remembered("anna", "likes tea"), 1)], None)

    first = await recall.memories("anna", SearchScope.GLOBAL)
    await apply_once(sessions, projection, [Positioned(remembered("bob", "likes chess"), 2)], None)
    after_bob = await recall.memories("anna", SearchScope.GLOBAL)

    assert ["likes tea"] == first
    assert ["likes chess", "likes tea"] == after_bob


async def test_a_change_drops_the_users_held_values_at_the_next_read(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """What a write replaced (a forgotten memory, an erased user) leaves recall's memory
    with the next versions read, though nobody asks for that user again."""
    projection, cache = MemoriesProjection(daily_ttl_days=1), ReadCache()
    recall = Recall(sessions, cache)
    await apply_once(sessions, projection, [Positioned(remembered("anna", "likes tea"), 1)], None)
    await apply_once(sessions, projection, [Positioned(remembered("bob", "likes chess"), 2)], None)
    await recall.memories("anna")
    await recall.memories("bob")
    held = len(cache)

    await apply_once(sessions, projection, [Positioned(remembered("anna", "has a cat"), 3)], None)
    cache.settle(await recall.feed.read(sessions))

    assert (2, 1) == (held, len(cache))


async def test_a_read_after_the_first_asks_only_for_the_users_changed_since(
    database_url: str,
) -> None:
    """On SQLite and PostgreSQL: the feed reads no user row it read before."""
    engine = create_engine(database_url)
    await drop_read_models(engine)
    await create_schema(engine)
    sessions = session_factory(engine)
    try:
        projection, feed = MemoriesProjection(daily_ttl_days=1), VersionFeed()
        anna: list[int] = []  # Anna's version after each read
        await apply_once(sessions, projection, [Positioned(remembered("anna", "tea"), 1)], None)
        wide = [(await feed.read(sessions))[MEMORIES]]
        anna.append(feed.position(MEMORIES, tracking.owner_key("acme", "anna")))
        for user, content, sequence in (("bob", "chess", 2), ("anna", "cat", 3), (None, "", 0)):
            if user is not None:
                memory = Positioned(remembered(user, content), sequence)
                await apply_once(sessions, projection, [memory], None)
            wide.append((await feed.read(sessions))[MEMORIES])
            anna.append(feed.position(MEMORIES, tracking.owner_key("acme", "anna")))
    finally:
        await engine.dispose()

    assert [1, 2, 3, 3] == wide
    assert anna[0] == anna[1] != anna[2] == anna[3] == 3
    assert 2 == feed.rows_read  # bob's row once, anna's second row once


async def test_a_rebuilt_projection_starts_its_users_again(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Read models dropped and folded again under a running recall are read again."""
    projection, recall = MemoriesProjection(daily_ttl_days=1), Recall(sessions, ReadCache())
    await apply_once(sessions, projection, [Positioned(remembered("anna", "likes tea"), 5)], None)
    before = await recall.memories("anna")
    async with sessions() as session, session.begin():
        await tracking.forget(session, [MEMORIES])
        await session.execute(delete(memories))
    await apply_once(sessions, projection, [Positioned(remembered("anna", "has a cat"), 1)], None)
    after = await recall.memories("anna")

    assert (["likes tea"], ["has a cat"]) == (before, after)


async def test_a_partitions_changes_are_its_projections(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A user's rows written through a partition's consumer move the user's version."""
    feed = VersionFeed()
    partition = subjects.partition_consumer(MEMORIES, 3)
    anna = tracking.owner_key("acme", "anna")
    async with sessions() as session, session.begin():
        await tracking.changed(session, partition, 4, {anna: False})
    first = await feed.read(sessions)
    held = first.of(MEMORIES, ("acme", "anna"))
    async with sessions() as session, session.begin():
        await tracking.changed(session, partition, 9, {anna: False})
    second = await feed.read(sessions)

    assert (4, 9) == (first[MEMORIES], second[MEMORIES])
    assert (9, anna) == second.of(MEMORIES, ("acme", "anna")) != held


def test_a_user_dropped_past_the_bound_is_followed_anew() -> None:
    """Asked again after the feed let them go, a user's version is new: nothing held for
    them before is served."""
    feed = VersionFeed(max_users=2)
    anna = feed.position(MEMORIES, "anna")
    feed.position(MEMORIES, "bob")
    feed.position(MEMORIES, "carl")

    assert anna != feed.position(MEMORIES, "anna")
    assert feed.position(MEMORIES, "carl") == feed.position(MEMORIES, "carl")


async def test_the_least_recently_used_value_is_dropped_over_capacity() -> None:
    """A bounded cache keeps the values used last."""
    cache = ReadCache(max_entries=2)
    for user in ("anna", "bob", "anna", "carl"):
        cache.keep(MEMORIES, user, 1, "state", owner=user)

    assert 2 == len(cache)
    assert (True, "state") == cache.lookup(MEMORIES, "carl", 1)
    assert (False, None) == cache.lookup(MEMORIES, "bob", 1)


async def test_a_request_arriving_after_a_commit_sees_it_though_a_read_before_it_runs(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A shared read that selected before the commit is not the answer of a later request."""
    selected, release = asyncio.Event(), asyncio.Event()

    async def read() -> Versions:
        found = await VersionFeed().read(sessions)
        selected.set()
        await release.wait()
        return found

    reads = VersionReads(read)
    early = asyncio.create_task(reads())
    await selected.wait()
    async with sessions() as session, session.begin():
        await tracking.changed(session, "memoryd-stm", 7)
    late = asyncio.create_task(reads())
    await asyncio.sleep(0)
    release.set()

    assert 0 == (await early)["memoryd-stm"]
    assert 7 == (await late)["memoryd-stm"]


async def test_positions_are_read_in_one_query_zero_for_a_consumer_without_one(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The recallable tracker reads positions together; an unknown consumer is at 0."""
    async with sessions() as session, session.begin():
        await tracking.advance(session, "memoryd-mtm", 7)
    async with sessions() as session:
        found = await tracking.positions(session, ("memoryd-mtm", "memoryd-persona"))

    assert {"memoryd-mtm": 7, "memoryd-persona": 0} == found


async def test_a_batch_moves_the_version_only_when_the_projection_folds_one_of_its_events(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A turn moves the memories projection's position only; a remember moves both."""
    projection = MemoriesProjection(daily_ttl_days=1)
    turn = TurnRecorded(occurred_at=T0, scope=SCOPE, query="hi", response="hello")
    memory = MemoryRemembered(occurred_at=T0, scope=SCOPE, content="Anna likes tea")
    consumers = [projection.consumer]

    await apply_once(sessions, projection, [Positioned(turn, 1)], None)
    async with sessions() as session:
        after_turn = (await tracking.positions(session, consumers), await versions(session))
    await apply_once(sessions, projection, [Positioned(memory, 2)], None)
    async with sessions() as session:
        after_memory = (await tracking.positions(session, consumers), await versions(session))

    anna = tracking.owner_key("acme", "anna")
    assert ({projection.consumer: 1}, {}) == after_turn
    assert ({projection.consumer: 2}, {None: 2, anna: 2}) == after_memory


async def versions(session: AsyncSession) -> dict[str | None, int]:
    """Return the memories projection's version (None) and each of its users' versions."""
    changes = await tracking.read_versions(session, {})
    return {row.owner: row.sequence for row in changes if row.consumer == MEMORIES}


async def test_a_value_held_at_the_requests_version_opens_no_session(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """At one version the second read costs no SQL at all; a newer version loads again."""
    cache = ReadCache()
    opened: list[int] = []

    def counted() -> AsyncSession:
        opened.append(1)
        return sessions()

    async def load(session: AsyncSession) -> str:
        return f"state {len(opened)}"

    reader = cast(async_sessionmaker[AsyncSession], counted)
    first = await cache.held(reader, "memoryd-stm", "anna", load, Versions({"memoryd-stm": 4}))
    again = await cache.held(reader, "memoryd-stm", "anna", load, Versions({"memoryd-stm": 4}))
    newer = await cache.held(reader, "memoryd-stm", "anna", load, Versions({"memoryd-stm": 5}))

    assert ("state 1", "state 1", "state 2") == (first, again, newer)
    assert 2 == len(opened)


async def test_a_daily_memory_held_by_recall_leaves_it_when_its_lifetime_ends(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Rows are held between memory writes, but time still ends a daily memory's lifetime."""
    projection = MemoriesProjection(daily_ttl_days=1)
    daily = MemoryRemembered(
        occurred_at=T0, scope=SCOPE, content="Anna is in Rome today", category=Category.DAILY
    )
    lasting = MemoryRemembered(occurred_at=T0, scope=SCOPE, content="Anna likes tea")
    await apply_once(sessions, projection, [Positioned(daily, 1), Positioned(lasting, 2)], None)
    cache = ReadCache()
    async with sessions() as session:
        at = Versions({projection.consumer: (await versions(session))[None]})

    async def held() -> list[str]:
        rows = await cache.held(
            sessions,
            projection.consumer,
            ("memories", SCOPE),
            lambda session: memories_store.in_scope(session, SCOPE, SearchScope.USER),
            at,
        )
        return sorted(row["content"] for row in memories_store.unexpired(rows, now))

    now = T0 + timedelta(hours=1)
    same_day = await held()
    now = T0 + timedelta(days=2)
    two_days_on = await held()

    assert ["Anna is in Rome today", "Anna likes tea"] == same_day
    assert ["Anna likes tea"] == two_days_on


def test_values_read_before_a_newer_version_leave_memory_once_it_is_seen() -> None:
    """Settling on newer versions drops what was read before them; the rest stays held."""
    cache = ReadCache()
    cache.keep("memoryd-stm", "erased-user", 3, "their pages")
    cache.keep("memoryd-stm", "anna", 5, "anna's pages")
    cache.keep("memoryd-graph", "erased-user", 2, "their graph")

    dropped = cache.settle(Versions({"memoryd-stm": 5, "memoryd-graph": 2}))

    assert 1 == dropped
    assert (False, None) == cache.lookup("memoryd-stm", "erased-user", 3)
    assert (True, "anna's pages") == cache.lookup("memoryd-stm", "anna", 5)
    assert (True, "their graph") == cache.lookup("memoryd-graph", "erased-user", 2)
    assert 0 == cache.settle(Versions({"memoryd-stm": 5, "memoryd-graph": 2}))


def test_rows_read_by_key_are_held_until_their_projection_writes_again() -> None:
    """Graph items recall read at one version are served to every request at it; a newer
    version starts afresh, and a request still at an older one keeps nothing it reads."""
    rows = RowsByKey(max_rows=3)
    rows.at(7, "anna")["item-1"] = "Anna's trip"
    rows.at(7, "bob")["item-2"] = None  # read, and outside bob's scope

    assert {"item-1": "Anna's trip"} == rows.at(7, "anna")
    assert {"item-2": None} == rows.at(7, "bob")
    rows.at(8, "anna")  # the graph projection wrote: every row may have changed
    assert {} == rows.at(8, "anna") == rows.at(8, "bob")
    rows.at(7, "anna")["item-1"] = "read before the write"
    assert {} == rows.at(8, "anna")


def test_rows_read_by_key_start_again_past_their_bound() -> None:
    rows = RowsByKey(max_rows=3, max_scopes=2)
    rows.at(1, "anna").update({"a": 1, "b": 2, "c": 3, "d": 4})
    rows.at(1, "bob")["b"] = 2

    assert {} == rows.at(1, "anna")
    assert {"b": 2} == rows.at(1, "bob")
    rows.at(1, "carol")  # a third scope: every scope starts again
    assert {} == rows.at(1, "bob")


def test_an_erased_users_values_leave_at_any_version() -> None:
    """An erasure drops what is held of the user, read at whichever version."""
    cache = ReadCache()
    cache.keep("memoryd-stm", "anna's pages", -3, "pages", owner="anna")
    cache.keep("memoryd-graph", "anna's graph", 17, "graph", owner="anna")
    cache.keep("memoryd-graph", "bob's graph", 17, "graph", owner="bob")

    dropped = cache.settle(Versions({}, erased=frozenset({"anna"})))

    assert (2, 1) == (dropped, len(cache))


def test_the_requests_of_one_versions_read_settle_once() -> None:
    """A value a request read again at the new version is not dropped by a request that
    shared the same versions read and settles after it."""
    cache = ReadCache()
    cache.keep(MEMORIES, "anna", -1, "before her write", owner="anna")
    at = Versions({}, moved=frozenset({(MEMORIES, "anna")}))

    first = cache.settle(at)
    cache.keep(MEMORIES, "anna", 7, "after her write", owner="anna")
    second = cache.settle(at)

    assert (1, 0) == (first, second)
    assert (True, "after her write") == cache.lookup(MEMORIES, "anna", 7)


async def test_versions_read_on_the_loop_are_the_sessions_read(tmp_path: Path) -> None:
    """On a SQLite file the feed reads on the event loop what a session reads: each
    projection's version, and a followed user's change."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'memoryd.db'}"
    engine = create_engine(url)
    await create_schema(engine)
    sessions = session_factory(engine)
    on_loop = loop_reads(url)
    assert on_loop is not None
    anna = tracking.owner_key("acme", "anna")
    async with sessions() as session, session.begin():
        await tracking.changed(session, MEMORIES, 3, {anna: False})
    fed, by_session = VersionFeed(on_loop=on_loop), VersionFeed()
    first = [await feed.read(sessions) for feed in (fed, by_session)]
    for v in first:
        v.of(MEMORIES, ("acme", "anna"))  # anna is followed from here on
    async with sessions() as session, session.begin():
        await tracking.changed(session, MEMORIES, 8, {anna: False})
    second = [await feed.read(sessions) for feed in (fed, by_session)]
    since = {MEMORIES: 3}
    read_here = on_loop.run(lambda connection: tracking.read_versions_on(connection, since))
    async with sessions() as session:
        read_by_session = await tracking.read_versions(session, since)
    await on_loop.dispose()
    await engine.dispose()

    assert [3, 3] == [v[MEMORIES] for v in first]
    assert [8, 8] == [v[MEMORIES] for v in second]
    assert [(8, anna), (8, anna)] == [v.of(MEMORIES, ("acme", "anna")) for v in second]
    assert read_by_session == read_here  # read on the loop itself, not through a session


async def test_a_locked_file_is_read_through_a_session(tmp_path: Path) -> None:
    """While another connection holds the file locked, a read on the loop gives up at once
    (it never holds the loop) and the feed reads through a session, which waits."""
    path = tmp_path / "memoryd.db"
    url = f"sqlite+aiosqlite:///{path}"
    engine = create_engine(url)
    await create_schema(engine)
    sessions = session_factory(engine)
    async with sessions() as session, session.begin():
        await tracking.changed(session, MEMORIES, 5)
    await engine.dispose()  # the lock below is only to be had with no other connection
    on_loop = loop_reads(url)
    assert on_loop is not None
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("UPDATE read_model_versions SET sequence = 6")

    with pytest.raises(LoopReadBusy):
        on_loop.run(lambda connection: tracking.read_versions_on(connection, None))
    reading = asyncio.create_task(VersionFeed(on_loop=on_loop).read(sessions))
    await asyncio.sleep(0.3)
    waited = not reading.done()
    holder.execute("COMMIT")
    holder.close()
    found = await reading
    await on_loop.dispose()
    await engine.dispose()

    assert waited
    assert 6 == found[MEMORIES]


def test_only_a_sqlite_file_is_read_on_the_loop() -> None:
    """PostgreSQL's driver makes one round trip a statement, and another connection to a
    database in memory would see another database: neither gets reads on the loop."""
    assert None is loop_reads("postgresql+asyncpg://postgres@127.0.0.1/test")
    assert None is loop_reads("sqlite+aiosqlite:///:memory:")
    assert None is loop_reads("sqlite+aiosqlite://")
