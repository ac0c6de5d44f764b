"""Recall's visit recorder: counts merged per user, appended once per interval."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from memoryd.services.recall.visits import VisitRecorder, merge
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.memoryos import SegmentsVisited
from memoryd.shared.contracts.scope import Scope

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
ANNA = Scope(tenant="t", user_id="anna", session_id="s1")
BOB = Scope(tenant="t", user_id="bob")


def visit(scope: Scope, *segments: str, minute: int = 0) -> SegmentsVisited:
    """Return a visit of ``segments`` at ``minute`` past T0."""
    return SegmentsVisited(
        occurred_at=T0 + timedelta(minutes=minute), scope=scope, segment_ids=segments
    )


def test_merge_sums_each_users_visits_at_the_last_visit_time() -> None:
    """One event per user; each segment's count is its visits; the time is the latest."""
    merged = merge([visit(ANNA, "a", "b"), visit(BOB, "x"), visit(ANNA, "a", minute=5)])

    by_user = {event.scope.user_id: event for event in merged}
    assert {"a": 2, "b": 1} == by_user["anna"].counts()
    assert {"x": 1} == by_user["bob"].counts()
    assert T0 + timedelta(minutes=5) == by_user["anna"].occurred_at


def test_a_visit_without_counts_counts_each_distinct_segment_once() -> None:
    """The events recall wrote before counts existed replay as before."""
    assert {"a": 1, "b": 1} == visit(ANNA, "a", "b", "a").counts()


def test_counts_must_match_the_segments() -> None:
    """A count list of another length is refused at the contract."""
    with pytest.raises(ValueError, match="one count per segment"):
        SegmentsVisited(occurred_at=T0, scope=ANNA, segment_ids=("a", "b"), visits=(2,))


async def test_the_recorder_appends_once_per_interval_and_flushes_on_close() -> None:
    """Visits wait for the interval; close appends what is pending."""
    appended: list[Event] = []

    async def record(event: Event) -> None:
        appended.append(event)

    recorder = VisitRecorder(record, interval=3600)
    await recorder.add(visit(ANNA, "a"))
    await recorder.add(visit(ANNA, "a", "b"))
    await asyncio.sleep(0)
    held = list(appended)
    await recorder.close()

    assert [] == held
    assert 1 == len(appended)
    assert isinstance(appended[0], SegmentsVisited)
    assert {"a": 2, "b": 1} == appended[0].counts()


async def test_interval_zero_appends_each_visit_before_returning() -> None:
    """With no interval the recall waits for its own append."""
    appended: list[Event] = []

    async def record(event: Event) -> None:
        appended.append(event)

    await VisitRecorder(record, interval=0).add(visit(BOB, "x"))

    assert 1 == len(appended)
