"""The MTM fold on SQLite: filings and visits give one state whatever order they land in."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memoryd.services.mtm.state import MtmBatch, fold_filed, fold_visited
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.contracts import Scope
from memoryd.shared.contracts.memoryos import PageFiled, SegmentsVisited
from memoryd.shared.domain.memoryos import DEFAULT_PARAMS, decode_vector, encode_vector
from memoryd.shared.domain.mtm import Segment

SCOPE = Scope(tenant="t", user_id="u", session_id="s1")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def filed(n: int, segment: str, vector: list[float], minutes: int) -> PageFiled:
    """Return the n-th page filed into ``segment``."""
    return PageFiled(
        event_id=uuid.UUID(int=n),
        occurred_at=T0 + timedelta(minutes=minutes),
        scope=SCOPE,
        cause_event_id=uuid.UUID(int=1_000 + n),
        turn_id=uuid.UUID(int=2_000 + n),
        segment_id=segment,
        opened=False,
        fscore=None,
        keywords=("bread",),
        vector=encode_vector(np.array(vector, dtype=np.float32)),
        query=f"q{n}",
        response=f"r{n}",
        turn_occurred_at=T0,
        embedder="test",
        decided_by="test",
    )


def visited(minutes: int) -> SegmentsVisited:
    """Return a recall's visit to segment "a"."""
    return SegmentsVisited(
        occurred_at=T0 + timedelta(minutes=minutes), scope=SCOPE, segment_ids=("a",)
    )


@pytest.fixture
async def batch(tmp_path: Path) -> AsyncIterator[MtmBatch]:
    """Yield an MTM batch on a fresh SQLite database."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'mtm.db'}")
    await create_schema(engine)
    async with session_factory(engine)() as session:
        yield MtmBatch(session, DEFAULT_PARAMS)
    await engine.dispose()


async def fold(batch: MtmBatch, events: list[PageFiled | SegmentsVisited]) -> Segment:
    """Fold the events in order and return segment "a"."""
    for event in events:
        if isinstance(event, PageFiled):
            await fold_filed(batch, event)
        else:
            await fold_visited(batch, event)
    return (await batch.user(("t", "u"))).segments["a"]


async def test_a_visit_and_a_filing_commute(batch: MtmBatch) -> None:
    """Live folds a visit after a filing, replay may fold it before: same segment."""
    first = filed(1, "a", [1.0, 0.0], minutes=0)
    second = filed(2, "a", [0.0, 1.0], minutes=5)
    in_order = await fold(batch, [first, visited(3), second])
    reordered = await fold(MtmBatch(batch.session, DEFAULT_PARAMS), [first, second, visited(3)])

    assert in_order == reordered
    assert (1, 2, T0 + timedelta(minutes=5)) == (
        in_order.n_visit,
        in_order.page_count,
        in_order.last_visit_at,
    )


async def test_a_page_filed_twice_counts_once(batch: MtmBatch) -> None:
    """A second copy of a filing (beyond the duplicate window) changes nothing."""
    page = filed(1, "a", [1.0, 0.0], minutes=0)

    segment = await fold(batch, [page, page])

    assert 1 == segment.page_count
    assert 1 == len(batch.new_pages)


def test_vectors_survive_the_wire_form() -> None:
    """A vector encoded into an event decodes to the same float32 values."""
    vector = np.array([0.6, -0.8, 0.0], dtype=np.float32)

    assert vector.tolist() == decode_vector(encode_vector(vector)).tolist()
