"""STM's fold announces evictions live; replay folds the same pages without announcing."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from uuid import UUID

from memoryd.services.runtime.projection import Effects
from memoryd.services.stm.projection import conversation_of, fold_turns
from memoryd.shared.contracts import PageEvicted, Scope, TurnRecorded
from memoryd.shared.domain.stm import ConversationKey, Page

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")


def turns(count: int) -> list[tuple[TurnRecorded, int]]:
    return [
        (
            TurnRecorded(
                occurred_at=T0 + timedelta(minutes=i), scope=SCOPE, query=f"q{i}", response="r"
            ),
            i + 1,
        )
        for i in range(count)
    ]


NINE = turns(9)


def folded(announce: bool) -> tuple[dict[ConversationKey, tuple[Page, ...]], list[UUID], Effects]:
    """Fold the same nine turns into a FIFO of seven."""
    fifos: dict[ConversationKey, tuple[Page, ...]] = defaultdict(tuple)
    effects, evicted = fold_turns(fifos, NINE, 7, announce=announce)
    return fifos, evicted, effects


def test_live_announces_each_page_added_and_each_eviction() -> None:
    """Nine turns into seven pages: nine pages added, two evicted, each evicted one an event."""
    _, evicted, effects = folded(announce=True)

    assert 2 == len(evicted)
    assert [e.turn_id for e in effects.derived if isinstance(e, PageEvicted)] == evicted
    kinds = [note.kind for note in effects.notifications]
    assert (9, 2) == (kinds.count("page.added"), kinds.count("page.evicted"))


def test_replay_keeps_the_same_pages_and_evicts_the_same_ones_silently() -> None:
    """Without announcing, the FIFO and the evicted ids are what live folding leaves."""
    live_fifos, live_evicted, _ = folded(announce=True)
    fifos, evicted, effects = folded(announce=False)

    assert live_fifos == fifos
    assert live_evicted == evicted
    assert not effects.derived and not effects.notifications
    key = conversation_of(NINE[0][0])
    assert [f"q{i}" for i in range(2, 9)] == [page.query for page in fifos[key]]
