"""The recallable tracker: a notice once every projection passed the event, in log order."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from memoryd.services.runtime.projection import Positioned
from memoryd.services.runtime.recallable import RecallableTracker, tracks_recall
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_notify import notification_subject
from memoryd.shared.contracts import PageEvicted, Scope, TurnRecorded, derived_id
from memoryd.shared.contracts.catalog import EVENT_TYPES
from memoryd.shared.contracts.events import Event, MemoryRemembered
from memoryd.shared.domain.memories import memory_identity

SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def turn(sequence: int) -> Positioned:
    """Return a turn stored at ``sequence``."""
    event = TurnRecorded(occurred_at=T0, scope=SCOPE, query=f"q{sequence}", response="a")
    return Positioned(event, sequence)


@dataclass(frozen=True)
class Folding:
    """A projection as the tracker sees it: its consumer and the types it folds."""

    consumer: str
    folds: frozenset[type[Event]] = frozenset(EVENT_TYPES)


def tracker() -> RecallableTracker:
    """Return a tracker over two projections that fold every type (it publishes nothing)."""
    return RecallableTracker([Folding("stm"), Folding("indexer")], notifier=None)  # type: ignore[list-item, arg-type]


def test_no_notice_until_every_projection_passed_the_event() -> None:
    """One projection having applied a turn is not enough; the last one to apply it is."""
    recallable = tracker()
    first = turn(3)

    early = recallable.advance("stm", 3, [first])
    due = recallable.advance("indexer", 3, [first])

    assert [] == early
    assert [(first.event.event_id, 3)] == [(n.event_id, n.stream_seq) for n in due]
    assert 0 == recallable.pending


def test_notices_come_in_log_order_each_once() -> None:
    """Several events passed at once are notified in stream order, and never again."""
    recallable = tracker()
    batch = [turn(1), turn(2), turn(4)]
    recallable.advance("indexer", 4, batch)

    partly = recallable.advance("stm", 2, batch[:2])
    rest = recallable.advance("stm", 4, batch[2:])
    again = recallable.advance("indexer", 5, batch)

    assert [1, 2] == [n.stream_seq for n in partly]
    assert [4] == [n.stream_seq for n in rest]
    assert [] == again


def test_only_events_a_caller_writes_are_notified() -> None:
    """Derived events (an eviction) are applied but not announced; a memory names its id."""
    recallable = tracker()
    cause = uuid.uuid4()
    evicted = PageEvicted(
        event_id=derived_id(cause, "page.evicted"),
        cause_event_id=cause,
        occurred_at=T0,
        scope=SCOPE,
        turn_id=uuid.uuid4(),
        query="q",
        response="a",
        turn_occurred_at=T0,
    )
    remembered = MemoryRemembered(occurred_at=T0, scope=SCOPE, key="diet", content="vegetarian")
    batch = [Positioned(evicted, 1), Positioned(remembered, 2)]

    recallable.advance("stm", 2, batch)
    due = recallable.advance("indexer", 2, batch)

    assert [(remembered.event_id, (memory_identity(remembered),))] == [
        (n.event_id, n.item_ids) for n in due
    ]


def test_an_event_waits_only_for_the_projections_that_fold_its_type() -> None:
    """A memory is recallable once the projections folding memories passed it, whatever the
    position of one that folds only turns (it never receives a memory event)."""
    projections = [
        Folding("stm", frozenset({TurnRecorded})),
        Folding("memories", frozenset({MemoryRemembered})),
    ]
    recallable = RecallableTracker(projections, notifier=None)  # type: ignore[arg-type]
    remembered = MemoryRemembered(occurred_at=T0, scope=SCOPE, key="diet", content="vegetarian")
    first = turn(1)

    recallable.advance("stm", 1, [first])
    due = recallable.advance("memories", 2, [Positioned(remembered, 2)])

    assert [remembered.event_id] == [n.event_id for n in due]
    assert 0 == recallable.pending


def test_events_with_other_readers_due_together_come_in_log_order() -> None:
    """A turn and a memory that become recallable in one commit are notified in stream
    order, though different projections fold them."""
    projections = [
        Folding("stm", frozenset({TurnRecorded})),
        Folding("memories", frozenset({MemoryRemembered})),
        Folding("indexer", frozenset({TurnRecorded, MemoryRemembered})),
    ]
    recallable = RecallableTracker(projections, notifier=None)  # type: ignore[arg-type]
    remembered = MemoryRemembered(occurred_at=T0, scope=SCOPE, key="diet", content="vegetarian")
    batch = [turn(1), Positioned(remembered, 2), turn(3), turn(5)]
    recallable.advance("stm", 5, [batch[0], batch[2], batch[3]])
    recallable.advance("memories", 2, [batch[1]])

    due = recallable.advance("indexer", 3, batch[:3])

    assert [1, 2, 3] == [n.stream_seq for n in due]
    assert 1 == recallable.pending


def test_the_notice_is_filed_under_its_event() -> None:
    """A recallable notice's subject ends with its event id, so a waiter filters on it."""
    recallable = tracker()
    item = turn(1)
    recallable.advance("stm", 1, [item])
    (notice,) = recallable.advance("indexer", 1, [item])

    subject = notification_subject(notice)

    assert f"memoryd.notify.acme.alice.recallable.{item.event.event_id}" == subject
    assert subject == subjects.recallable_filter(item.event.event_id, SCOPE)
    assert subject.startswith(subjects.notify_filter("acme", "alice")[:-1])


def test_the_tracker_runs_only_where_every_projection_recall_reads_runs() -> None:
    """A process running only some projections cannot say an event is recallable."""
    assert tracks_recall(subjects.PROJECTION_CONSUMERS)
    assert not tracks_recall([subjects.STM_CONSUMER, subjects.INDEXER_CONSUMER])
