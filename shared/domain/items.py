"""The identity and text of a retrievable item (a turn or a memory), shared by every read model.

The search index, the graph and recall name an item by the same point id, and search the same
text of it: both are pure functions of the events, so each projection derives them alike.
"""

from __future__ import annotations

import uuid

from memoryd.shared.adapters.index.port import Kind
from memoryd.shared.contracts.events import (
    MemoryForgotten,
    MemoryRemembered,
    TurnRecorded,
    derived_id,
)
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.memories import memory_identity


def point_id(item_id: uuid.UUID, kind: Kind, scope: Scope) -> uuid.UUID:
    """Return the index point id of an item: deterministic, so a re-apply replaces it.

    The owner is part of the id, so an event naming another user's item id can neither
    replace nor delete that user's point.
    """
    return derived_id(item_id, f"index.{kind}.{scope.tenant}.{scope.user_id}")


def turn_text(event: TurnRecorded) -> str:
    """Return the searchable text of a turn: its non-empty sides, query first."""
    return "\n".join(part for part in (event.query.strip(), event.response.strip()) if part)


def memory_text(event: MemoryRemembered) -> str:
    """Return the searchable text of a memory: its key (when named) and content."""
    return f"{event.key}: {event.content}" if event.key else event.content


def forget_ids(event: MemoryForgotten) -> tuple[uuid.UUID, ...]:
    """Return the point a forget removes (by key or by id: the memory's one identity)."""
    return (point_id(memory_identity(event), "memory", event.scope),)
