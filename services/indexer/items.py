"""Turn log events into index operations (pure): what to upsert, what to delete.

Adding a retrievable kind is one function here (event -> ``Upsert``) plus a line in
``plan``: the projection embeds and applies whatever ``plan`` returns, in log order.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.shared.adapters.index import IndexPayload, Kind, ScopeFilter
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
    derived_id,
)
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.memories import memory_id_for_key


@dataclass(frozen=True, slots=True)
class Upsert:
    """Embed ``text`` and store it as point ``id`` (replacing any point with that id)."""

    id: uuid.UUID
    text: str
    payload: IndexPayload


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove these points."""

    ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class DeleteWhere:
    """Remove every point inside this scope."""

    filter: ScopeFilter


Operation = Upsert | Delete | DeleteWhere


def point_id(item_id: uuid.UUID, kind: Kind, scope: Scope) -> uuid.UUID:
    """Return the index point id of an item: deterministic, so a re-apply replaces it.

    The owner is part of the id, so an event naming another user's item id can neither
    replace nor delete that user's point.
    """
    return derived_id(item_id, f"index.{kind}.{scope.tenant}.{scope.user_id}")


def turn_text(event: TurnRecorded) -> str:
    """Return the searchable text of a turn: its non-empty sides, query first."""
    return "\n".join(part for part in (event.query.strip(), event.response.strip()) if part)


def _payload(scope: Scope, kind: Kind, event: AnyEvent, item_id: uuid.UUID) -> dict[str, object]:
    return {
        "tenant": scope.tenant,
        "user_id": scope.user_id,
        "agent_id": scope.agent_id,
        "session_id": scope.session_id,
        "namespace": scope.namespace,
        "kind": kind,
        "occurred_at": event.occurred_at.timestamp(),
        "turn_id": str(item_id),
        "source_event_id": event.event_id,
    }


def memory_text(event: MemoryRemembered) -> str:
    """Return the searchable text of a memory: its key (when named) and content."""
    return f"{event.key}: {event.content}" if event.key else event.content


def turn_upsert(event: TurnRecorded) -> Upsert:
    """Index a turn as one point whose provenance is the turn's event id."""
    payload = IndexPayload.model_validate(_payload(event.scope, "turn", event, event.event_id))
    return Upsert(point_id(event.event_id, "turn", event.scope), turn_text(event), payload)


def memory_upsert(event: MemoryRemembered) -> Upsert:
    """Index an explicit memory (key and content), keyed by its memory id."""
    fields = _payload(event.scope, "memory", event, event.memory_id)
    fields |= {
        "turn_id": None,
        "category": event.category.value,
        "memory_type": event.memory_type.value,
        "importance": event.importance,
        "evergreen": event.evergreen,
        "extra": {"memory_id": str(event.memory_id), "key": event.key},
    }
    text = memory_text(event)
    return Upsert(
        point_id(event.memory_id, "memory", event.scope), text, IndexPayload.model_validate(fields)
    )


def forget_ids(event: MemoryForgotten) -> tuple[uuid.UUID, ...]:
    """Return the point a forget removes (a key names the id the client derived for it)."""
    memory_id = event.memory_id or memory_id_for_key(event.scope, event.key or "")
    return (point_id(memory_id, "memory", event.scope),)


def session_filter(event: SessionEnded) -> ScopeFilter:
    """Return the scope of the conversation memories a session end clears."""
    scope = event.scope
    return ScopeFilter(
        tenant=scope.tenant,
        user_id=scope.user_id,
        session_id=scope.session_id,
        kinds=("memory",),
        categories=(Category.CONVERSATION.value,),
    )


def operation(event: AnyEvent) -> Operation | None:
    """Return what one event does to the index (None: nothing)."""
    if isinstance(event, TurnRecorded):
        return turn_upsert(event)
    if isinstance(event, MemoryRemembered):
        return memory_upsert(event)
    if isinstance(event, MemoryForgotten):
        return Delete(forget_ids(event))
    if isinstance(event, MemoryExpired):
        return Delete((point_id(event.memory_id, "memory", event.scope),))
    if isinstance(event, SessionEnded):
        return DeleteWhere(session_filter(event))
    return None


def plan(events: Sequence[AnyEvent]) -> list[Operation]:
    """Return the index operations of a batch, in log order."""
    return [op for op in map(operation, events) if op is not None]
