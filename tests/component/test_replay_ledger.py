"""A replay's fold keeps each projection's ledger in memory, and admits what live admitted.

A replay begins every replayed ledger empty and holds it while it folds (the rows are written
too, for the live workers after it): a later copy of an event is skipped and another event
under its id refused, in another batch or another partition, as live did it. Real SQLite file,
no broker, no model.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.runtime.projection import PartitionOf, Positioned, Projection
from memoryd.services.runtime.replay import fold
from memoryd.services.stm.projection import StmProjection
from memoryd.shared import subjects
from memoryd.shared.adapters.sql import ledger
from memoryd.shared.contracts import Scope, TurnRecorded
from memoryd.shared.contracts.scope import SearchScope
from memoryd.shared.stores import stm

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def turn(scope: Scope, i: int) -> TurnRecorded:
    return TurnRecorded(
        occurred_at=T0 + timedelta(minutes=i), scope=scope, query=f"q{i}", response=f"r{i}"
    )


def positioned(events: Sequence[TurnRecorded]) -> list[Positioned]:
    return [Positioned(event, seq) for seq, event in enumerate(events, start=1)]


def user_in(partition: int, partitions: int = 2) -> str:
    """Return a user id whose events fall in ``partition``."""
    users = (f"user-{n}" for n in range(100))
    return next(user for user in users if subjects.partition("acme", user, partitions) == partition)


async def queries(sessions: async_sessionmaker[AsyncSession], scope: Scope) -> list[str]:
    async with sessions() as session:
        pages = await stm.conversation_pages(session, scope, SearchScope.AGENT)
    return [page.query for page in pages]


async def test_a_later_copy_is_skipped_and_an_impostor_refused_in_another_batch(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Batches of one event: the copy and the impostor come batches after the first."""
    scope = Scope(tenant="acme", user_id="alice", session_id="s1")
    first, second = turn(scope, 1), turn(scope, 2)
    impostor = first.model_copy(update={"query": "I live in Madrid"})
    events = positioned([first, second, first, impostor])
    projection = StmProjection(7)

    await fold(sessions, [projection], events, {projection.consumer: 4}, batch_size=1)

    assert ["q1", "q2"] == await queries(sessions, scope)
    async with sessions() as session:
        rows = await ledger.first_seen(session, projection.consumer, [first.event_id])
    assert {first.event_id: 1} == {event_id: seen.sequence for event_id, seen in rows.items()}


async def test_partitions_of_one_projection_share_its_ledger(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """An impostor under another user's scope lands in a partition folded later, and is refused
    there: an event id is one identity whatever the partition."""
    alice, bob = (
        Scope(tenant="acme", user_id=user_in(partition), session_id="s1") for partition in (0, 1)
    )
    first = turn(alice, 1)
    impostor = first.model_copy(update={"scope": bob, "query": "I am bob now"})
    events = positioned([first, turn(bob, 2), impostor])
    stm_projection = StmProjection(7)
    partitions: list[Projection] = [PartitionOf(stm_projection, p, 2) for p in range(2)]
    targets = {projection.consumer: 3 for projection in partitions}

    await fold(sessions, partitions, events, targets)

    assert ["q1"] == await queries(sessions, alice)
    assert ["q2"] == await queries(sessions, bob)
