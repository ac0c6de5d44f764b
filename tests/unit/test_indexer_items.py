"""Unit tests of the indexer's event -> index operation mapping."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from memoryd.services.indexer.items import (
    Delete,
    DeleteWhere,
    Upsert,
    memory_upsert,
    plan,
    point_id,
    turn_upsert,
)
from memoryd.shared.contracts.events import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.memories import memory_id_for_key

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
ALICE = Scope(tenant="acme", user_id="alice", session_id="s1")
MALLORY = Scope(tenant="acme", user_id="mallory")


def remembered(scope: Scope, memory_id: uuid.UUID, content: str = "likes tea") -> MemoryRemembered:
    return MemoryRemembered(
        occurred_at=NOW, scope=scope, memory_id=memory_id, key="drink", content=content
    )


def test_a_turn_is_indexed_with_both_sides_and_its_provenance() -> None:
    """A turn's point holds query and response, its scope, and the turn's event id."""
    event = TurnRecorded(occurred_at=NOW, scope=ALICE, query="Hi there", response="Hello!")
    op = turn_upsert(event)
    assert "Hi there\nHello!" == op.text
    assert ("acme", "alice", "s1", "turn") == (
        op.payload.tenant,
        op.payload.user_id,
        op.payload.session_id,
        op.payload.kind,
    )
    assert str(event.event_id) == op.payload.turn_id
    assert NOW.timestamp() == op.payload.occurred_at


def test_remembering_again_replaces_the_same_point() -> None:
    """An update of a memory targets the point of the first version (same id)."""
    memory_id = uuid.uuid4()
    first = memory_upsert(remembered(ALICE, memory_id, "likes tea"))
    second = memory_upsert(remembered(ALICE, memory_id, "likes coffee"))
    assert first.id == second.id
    assert "drink: likes coffee" == second.text


def test_forgetting_by_key_deletes_the_point_remember_by_key_made() -> None:
    """Forget by key removes the point of the memory the client stored under that key."""
    memory_id = memory_id_for_key(ALICE, "drink")
    stored = memory_upsert(remembered(ALICE, memory_id))
    forgotten = plan([MemoryForgotten(occurred_at=NOW, scope=ALICE, key="drink")])
    assert [Delete((stored.id,))] == forgotten


def test_another_user_cannot_delete_or_overwrite_a_point_by_naming_its_id() -> None:
    """A point id includes its owner, so the same memory id from another user is another point."""
    memory_id = uuid.uuid4()
    assert point_id(memory_id, "memory", ALICE) != point_id(memory_id, "memory", MALLORY)
    attack = plan([MemoryForgotten(occurred_at=NOW, scope=MALLORY, memory_id=memory_id)])
    assert [Delete((point_id(memory_id, "memory", MALLORY),))] == attack


def test_session_end_clears_only_that_sessions_conversation_memories() -> None:
    """A session end deletes conversation-category memories of that user's session."""
    [op] = plan([SessionEnded(occurred_at=NOW, scope=ALICE)])
    assert isinstance(op, DeleteWhere)
    assert ("alice", "s1", ("memory",), (Category.CONVERSATION.value,)) == (
        op.filter.user_id,
        op.filter.session_id,
        op.filter.kinds,
        op.filter.categories,
    )


def test_an_expired_memory_is_deleted_and_other_events_do_nothing() -> None:
    """Expiry deletes the memory's point; events the index ignores plan nothing."""
    memory_id = uuid.uuid4()
    expired = MemoryExpired(
        occurred_at=NOW,
        scope=ALICE,
        memory_id=memory_id,
        source_event_id=uuid.uuid4(),
        expires_at=NOW,
    )
    ops = plan([expired])
    assert [Delete((point_id(memory_id, "memory", ALICE),))] == ops
    assert all(isinstance(op, Upsert) for op in plan([remembered(ALICE, memory_id)]))
