"""The first occurrence of an event id wins; a copy is skipped, a conflicting copy refused."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from memoryd.shared.adapters.sql.ledger import FirstSeen, admit, digest
from memoryd.shared.contracts import Scope, TurnRecorded
from memoryd.shared.contracts.events import Event

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="t", user_id="u")


@dataclass(frozen=True)
class Item:
    event: Event
    sequence: int


def turn(event_id: uuid.UUID, query: str) -> TurnRecorded:
    return TurnRecorded(event_id=event_id, occurred_at=T0, scope=SCOPE, query=query, response="")


def test_new_ids_are_admitted_and_recorded_where_first_seen() -> None:
    """Events never applied before are admitted, each recorded at its own sequence."""
    a, b = turn(uuid.uuid4(), "a"), turn(uuid.uuid4(), "b")

    admission = admit([Item(a, 1), Item(b, 2)], {})

    assert [1, 2] == [item.sequence for item in admission.admitted]
    assert {a.event_id: FirstSeen(1, digest(a)), b.event_id: FirstSeen(2, digest(b))} == (
        admission.new
    )


def test_a_copy_of_an_applied_event_is_skipped() -> None:
    """The same event met again (earlier batch or same batch) is a duplicate, not applied."""
    a = turn(uuid.uuid4(), "a")

    earlier = admit([Item(a, 9)], {a.event_id: FirstSeen(3, digest(a))})
    same_batch = admit([Item(a, 3), Item(a, 9)], {})

    assert ([], [9]) == (
        [i.sequence for i in earlier.admitted],
        [i.sequence for i in earlier.duplicates],
    )
    assert ([3], [9]) == (
        [i.sequence for i in same_batch.admitted],
        [i.sequence for i in same_batch.duplicates],
    )
    assert [] == earlier.conflicts == same_batch.conflicts


def test_an_id_reused_for_other_content_is_refused_with_the_first_sequence() -> None:
    """A second event under an applied id is a conflict whose reason names where it was first."""
    event_id = uuid.uuid4()
    first, second = turn(event_id, "first"), turn(event_id, "second")

    admission = admit([Item(first, 4), Item(second, 7)], {})

    assert [4] == [item.sequence for item in admission.admitted]
    assert [7] == [item.sequence for item, _ in admission.conflicts]
    reason = admission.conflicts[0][1]
    assert str(event_id) in reason and "stream seq 4" in reason
    assert "\n" not in reason
