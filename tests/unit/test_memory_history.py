"""A memory's history is the fold of one user's log: its versions and what ended it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from memoryd.shared.contracts import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    Scope,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.domain.memories import memory_history, memory_id_for_key, memory_identity

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")
DIET = memory_id_for_key(SCOPE, "diet")


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def remembered(
    minutes: int, content: str, key: str | None = "diet", category: Category = Category.CORE
) -> MemoryRemembered:
    return MemoryRemembered(
        occurred_at=at(minutes), scope=SCOPE, key=key, content=content, category=category
    )


def test_history_lists_every_version_and_the_forget_in_log_order() -> None:
    """Two remembers of a key and its forget are its history; other events are left out."""
    first, second = remembered(0, "vegetarian"), remembered(2, "vegan")
    forgotten = MemoryForgotten(occurred_at=at(3), scope=SCOPE, key="diet")
    log = [
        first,
        TurnRecorded(occurred_at=at(1), scope=SCOPE, query="hi", response="hello"),
        remembered(1, "Lisbon", key="home"),
        second,
        forgotten,
    ]

    assert [first, second, forgotten] == memory_history(log, DIET)


def test_a_keyless_memory_is_found_by_the_id_remember_returned() -> None:
    """Without a key the memory is its event id, and a forget by that id ends it."""
    note = remembered(0, "met Bob at the fair", key=None)
    forgotten = MemoryForgotten(occurred_at=at(1), scope=SCOPE, memory_id=memory_identity(note))

    assert [note, forgotten] == memory_history([note, forgotten], memory_identity(note))


def test_an_expiry_counts_only_for_the_version_it_expired() -> None:
    """An expiry of an older version (since replaced) is not part of the history."""
    old, new = remembered(0, "in Paris", category=Category.DAILY), remembered(5, "in Rome")
    stale = MemoryExpired(
        occurred_at=at(6),
        scope=SCOPE,
        memory_id=DIET,
        source_event_id=old.event_id,
        expires_at=at(6),
    )
    current = MemoryExpired(
        occurred_at=at(7),
        scope=SCOPE,
        memory_id=DIET,
        source_event_id=new.event_id,
        expires_at=at(7),
    )

    assert [old, new, current] == memory_history([old, new, stale, current], DIET)


def test_a_session_end_belongs_to_the_history_of_a_conversation_memory_it_cleared() -> None:
    """Ending the session clears a conversation memory of it, and not a core one."""
    chat = remembered(0, "wants a window seat", key="seat", category=Category.CONVERSATION)
    core = remembered(0, "vegetarian", key="food")
    ended = SessionEnded(occurred_at=at(1), scope=SCOPE)
    other_session = SessionEnded(
        occurred_at=at(1), scope=SCOPE.model_copy(update={"session_id": "s2"})
    )

    assert [chat, ended] == memory_history(
        [chat, other_session, ended], memory_id_for_key(SCOPE, "seat")
    )
    assert [core] == memory_history([core, ended], memory_id_for_key(SCOPE, "food"))


def test_an_unknown_memory_has_no_history() -> None:
    """A memory id nothing in the log names has an empty history."""
    assert [] == memory_history([remembered(0, "vegan")], uuid.uuid4())
