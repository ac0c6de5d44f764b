"""MTM keeps each user's segments between its batches, on SQLite: the same state as reading
them back for every batch, and never a stale one (another writer, a failed batch, an erasure).

Real parts: the MTM fold, ``apply_once`` and its tracking row on SQLite; the batches are the
log's page.filed decisions, folded as replay folds them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.mtm.projection import MtmProjection
from memoryd.services.runtime.decisions import NoDecisions
from memoryd.services.runtime.projection import Positioned, apply_once
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.events import Event, UserErased
from memoryd.shared.contracts.memoryos import PageFiled
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS
from memoryd.shared.domain.mtm import Segment
from memoryd.shared.stores import mtm
from tests.events import page_filed

SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def projection() -> MtmProjection:
    """Return an MTM worker that folds recorded decisions (it makes none)."""
    return MtmProjection(NoDecisions(), NoDecisions(), NoDecisions(), DEFAULT_PARAMS)


def filed(n: int, user: str = "alice") -> PageFiled:
    """Return the n-th page filed into ``user``'s segment."""
    return page_filed(n, user=user, opened=n == 1)


async def fold(
    sessions: async_sessionmaker[AsyncSession], worker: MtmProjection, at: int, *events: Event
) -> None:
    """Apply ``events`` as the log's sequences ``at``, ``at`` + 1, ..."""
    batch = [Positioned(event, seq) for seq, event in enumerate(events, start=at)]  # type: ignore[arg-type]
    await apply_once(sessions, worker, batch, None)


async def segment(sessions: async_sessionmaker[AsyncSession], user: str = "alice") -> Segment:
    async with sessions() as session:
        [found] = await mtm.load_segments(session, "acme", user)
    return found


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record each user whose segments a batch reads from SQL."""
    read: list[str] = []
    load = mtm.load_segments

    async def counted(session: AsyncSession, tenant: str, user_id: str) -> list[Segment]:
        read.append(user_id)
        return await load(session, tenant, user_id)

    monkeypatch.setattr(mtm, "load_segments", counted)
    return read


async def test_segments_held_between_batches_fold_as_sql_would(
    sessions: async_sessionmaker[AsyncSession], loads: list[str]
) -> None:
    """Batches after the first read nothing from SQL, and the state is what a worker that
    reads SQL for every batch makes of the same log."""
    worker = projection()
    for n in range(1, 5):
        await fold(sessions, worker, n, filed(n))
    read_by_the_batches = list(loads)

    assert ["alice"] == read_by_the_batches  # the first batch only
    assert 4 == (await segment(sessions)).page_count
    assert 1 == worker.held.items  # one segment


async def test_a_batch_another_worker_applied_is_not_folded_over(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Another process on the same consumer moved the position: the next batch reads SQL, so
    that process's filing stays (holding on would count 2 pages instead of 3)."""
    first, other = projection(), projection()
    await fold(sessions, first, 1, filed(1))
    await fold(sessions, other, 2, filed(2))
    await fold(sessions, first, 3, filed(3))

    assert 3 == (await segment(sessions)).page_count


async def test_a_failed_batch_leaves_nothing_held(
    sessions: async_sessionmaker[AsyncSession], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose transaction fails is rolled back and held nowhere: applied again, its
    page counts once."""
    worker = projection()
    await fold(sessions, worker, 1, filed(1))
    save = mtm.save

    async def fails(*args: object, **kwargs: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(mtm, "save", fails)
    with pytest.raises(OSError, match="disk full"):
        await fold(sessions, worker, 2, filed(2))
    monkeypatch.setattr(mtm, "save", save)
    await fold(sessions, worker, 2, filed(2))

    assert 2 == (await segment(sessions)).page_count


async def test_an_erasure_in_the_batch_drops_what_was_held(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    """Pages filed after an erasure in the same batch start from nothing, not from the held
    segment; another user's segments stay."""
    worker = projection()
    await fold(sessions, worker, 1, filed(1), filed(2), filed(1, user="bob"))
    erased = UserErased(occurred_at=T0 + timedelta(hours=1), scope=SCOPE)
    await fold(sessions, worker, 4, erased, filed(3))
    await fold(sessions, worker, 6, filed(4))

    assert (2, 1) == (
        (await segment(sessions)).page_count,
        (await segment(sessions, "bob")).page_count,
    )


async def test_nothing_is_held_when_the_bound_is_zero(
    sessions: async_sessionmaker[AsyncSession], loads: list[str]
) -> None:
    """``MEMORYD_MTM_HELD_SEGMENTS=0``: every batch reads SQL, as before."""
    worker = MtmProjection(
        NoDecisions(), NoDecisions(), NoDecisions(), DEFAULT_PARAMS, held_segments=0
    )
    for n in range(1, 4):
        await fold(sessions, worker, n, filed(n))
    read_by_the_batches = list(loads)

    assert ["alice"] * 3 == read_by_the_batches
    assert 3 == (await segment(sessions)).page_count
