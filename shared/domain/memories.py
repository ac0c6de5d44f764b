"""Explicit memories: identity, lifetime and plain keyword matching (pure)."""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TypeGuard

from memoryd.shared.contracts.events import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
)
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.text import terms

MEMORY_NAMESPACE = uuid.UUID("0b6f2f7e-3c1a-4a53-8a8c-5a3f3f1d2e90")


def memory_id_for_key(scope: Scope, key: str) -> uuid.UUID:
    """Return the id of the memory stored under ``key``: remembering a key again replaces it."""
    return uuid.uuid5(
        MEMORY_NAMESPACE,
        "/".join((scope.tenant, scope.user_id, scope.agent_id, scope.namespace, key)),
    )


def memory_identity(event: MemoryRemembered | MemoryForgotten) -> uuid.UUID:
    """Return the id of the memory an event names: the service decides it, not the client.

    A key is the identity within its scope (tenant, user, agent, namespace): the id derives
    from it, and a ``memory_id`` the client sent along is ignored. Without a key the event's
    ``memory_id`` names the memory; a keyless remember without one is known by its event id.
    Every projection (memories, index, graph) resolves ids here, so they agree.
    """
    if event.key is not None:
        return memory_id_for_key(event.scope, event.key)
    if event.memory_id is not None:
        return event.memory_id
    return event.event_id


def expires_at(category: Category, created_at: datetime, daily_ttl_days: int) -> datetime | None:
    """Return when a memory of ``category`` expires (None: it does not expire by age)."""
    if category is Category.DAILY:
        return created_at + timedelta(days=daily_ttl_days)
    return None


def keyword_score(query: str, content: str, importance: float) -> float:
    """Score how well ``content`` matches ``query``: share of query terms found, plus importance.

    An empty query matches everything by importance alone; no shared term scores 0.
    """
    query_terms = set(terms(query))
    if not query_terms:
        return importance
    content_terms = set(terms(content))
    overlap = len(query_terms & content_terms)
    if overlap == 0:
        return 0.0
    return overlap / math.sqrt(len(query_terms) * max(1, len(content_terms))) + 0.1 * importance


MemoryEvent = MemoryRemembered | MemoryForgotten | MemoryExpired | SessionEnded


def _clears(version: MemoryRemembered | None, ended: SessionEnded) -> bool:
    """Say whether a session's end cleared ``version`` (a conversation memory of it)."""
    return (
        version is not None
        and version.category is Category.CONVERSATION
        and (version.scope.tenant, version.scope.user_id, version.scope.session_id)
        == (ended.scope.tenant, ended.scope.user_id, ended.scope.session_id)
    )


def _concerns(
    event: object, memory_id: uuid.UUID, live: MemoryRemembered | None
) -> TypeGuard[MemoryEvent]:
    """Say whether ``event`` made or ended memory ``memory_id`` (``live``: its live version)."""
    if isinstance(event, MemoryRemembered | MemoryForgotten):
        return memory_identity(event) == memory_id
    if isinstance(event, MemoryExpired):
        return live is not None and event.source_event_id == live.event_id
    return isinstance(event, SessionEnded) and _clears(live, event)


def memory_history(events: Iterable[object], memory_id: uuid.UUID) -> list[MemoryEvent]:
    """Return the events that made and ended memory ``memory_id``, in log order.

    Every remember of it (its versions) and forget of it; an expiry of the version then live;
    a session end that cleared it (a conversation memory of that session). ``events`` is one
    user's log in order; the rest of it is left out.
    """
    history: list[MemoryEvent] = []
    live: MemoryRemembered | None = None
    for event in events:
        if _concerns(event, memory_id, live):
            history.append(event)
            live = event if isinstance(event, MemoryRemembered) else None
    return history
