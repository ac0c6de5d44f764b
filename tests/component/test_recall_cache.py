"""Recall's read cache on SQLite: state is read again exactly when its writer changed it."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio
from datetime import UTC, datetime, timedelta
from typing import cast

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.recall.cache import (
    ReadCache,
    RowsByKey,
    VersionReads,
    Versions,
    read_versions,
)
from memoryd.services.runtime.projection import Positioned, apply_once
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.contracts.events import Category, MemoryRemembered, TurnRecorded
from memoryd.shared.contracts.scope import Scope, SearchScope
from memoryd.shared.stores import memories as memories_store

T0 = datetime(2026, 3, 1, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="anna")


async def test_state_is_loaded_again_only_after_its_consumer_changes_it(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Two reads at one version load once; a change by the consumer loads again."""
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
        await tracking.changed(session, "memoryd-mtm", 7)
    async with sessions() as session:
        third = await cache.read(session, "memoryd-mtm", "anna", load)
        other_writer = await cache.read(session, "memoryd-graph", "anna", load)

    assert (1, 1, 2, 3) == (first, second, third, other_writer)


async def test_a_consumer_that_moved_past_events_it_does_not_fold_keeps_the_cached_state(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Recall traffic (events the graph does not fold) moves the position, not the version."""
    cache = ReadCache()
    loads: list[int] = []

    async def load(session: AsyncSession) -> int:
        loads.append(1)
        return len(loads)

    async with sessions() as session, session.begin():
        await tracking.advance(session, "memoryd-graph", 3)
        await tracking.changed(session, "memoryd-graph", 3)
    async with sessions() as session:
        first = await cache.read(session, "memoryd-graph", "anna", load)
    async with sessions() as session, session.begin():
        await tracking.advance(session, "memoryd-graph", 90)
    async with sessions() as session:
        second = await cache.read(session, "memoryd-graph", "anna", load)

    assert (1, 1) == (first, second)


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


async def test_versions_are_read_in_one_query_zero_for_a_consumer_without_one(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """The tiers read their writers' versions together; an unknown consumer is at 0."""
    async with sessions() as session, session.begin():
        await tracking.changed(session, "memoryd-mtm", 7)
    async with sessions() as session:
        found = await tracking.versions(session, ("memoryd-mtm", "memoryd-persona"))

    assert {"memoryd-mtm": 7, "memoryd-persona": 0} == found


async def test_a_request_arriving_after_a_commit_sees_it_though_a_read_before_it_runs(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """A shared read that selected before the commit is not the answer of a later request."""
    selected, release = asyncio.Event(), asyncio.Event()

    async def read() -> Versions:
        found = await read_versions(sessions)
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

    assert ({projection.consumer: 1}, 0) == after_turn
    assert ({projection.consumer: 2}, 2) == after_memory


async def versions(session: AsyncSession) -> int:
    """Return the memories projection's version."""
    found = await tracking.versions(session, [MemoriesProjection.consumer])
    return found[MemoriesProjection.consumer]


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
    first = await cache.held(reader, "memoryd-stm", "anna", load, {"memoryd-stm": 4})
    again = await cache.held(reader, "memoryd-stm", "anna", load, {"memoryd-stm": 4})
    newer = await cache.held(reader, "memoryd-stm", "anna", load, {"memoryd-stm": 5})

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
        at = await tracking.versions(session, [projection.consumer])

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

    dropped = cache.settle({"memoryd-stm": 5, "memoryd-graph": 2})

    assert 1 == dropped
    assert (False, None) == cache.lookup("memoryd-stm", "erased-user", 3)
    assert (True, "anna's pages") == cache.lookup("memoryd-stm", "anna", 5)
    assert (True, "their graph") == cache.lookup("memoryd-graph", "erased-user", 2)
    assert 0 == cache.settle({"memoryd-stm": 5, "memoryd-graph": 2})


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
