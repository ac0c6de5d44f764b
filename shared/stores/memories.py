"""The explicit-memories read model: one row per memory identity (see domain.memories)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import memories, memory_expirations
from memoryd.shared.adapters.sql.times import stored_utc
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.events import Category, MemoryRemembered
from memoryd.shared.contracts.memories import ListMemoriesRequest
from memoryd.shared.contracts.scope import Scope, SearchScope
from memoryd.shared.domain.memories import expires_at

TABLES = (memories,)
_CHUNK = 500  # ids per IN (...) clause


@dataclass(frozen=True, slots=True)
class Held:
    """Who holds a memory identity already, and since when."""

    tenant: str
    user_id: str
    created_at: datetime


def memory_row(
    event: MemoryRemembered,
    memory_id: uuid.UUID,
    held: Held | None,
    sequence: int,
    daily_ttl_days: int,
) -> dict[str, Any] | None:
    """Return the row a remember writes, or None when another user holds the identity.

    A replaced memory keeps its creation time; an id held by another user is never overwritten.
    """
    scope = event.scope
    if held is not None and (held.tenant, held.user_id) != (scope.tenant, scope.user_id):
        return None
    return {
        "memory_id": memory_id,
        "tenant": scope.tenant,
        "user_id": scope.user_id,
        "agent_id": scope.agent_id,
        "session_id": scope.session_id,
        "namespace": scope.namespace,
        "key": event.key,
        "content": event.content,
        "category": event.category.value,
        "memory_type": event.memory_type.value,
        "importance": event.importance,
        "evergreen": event.evergreen,
        "metadata": event.metadata,
        "created_at": held.created_at if held is not None else event.occurred_at,
        "updated_at": event.occurred_at,
        "expires_at": expires_at(event.category, event.occurred_at, daily_ttl_days),
        "source_event_id": event.event_id,
        "stream_seq": sequence,
    }


async def holders(session: AsyncSession, memory_ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Held]:
    """Return who holds each of ``memory_ids`` that someone holds."""
    c = memories.c
    found: dict[uuid.UUID, Held] = {}
    for start in range(0, len(memory_ids), _CHUNK):
        rows = await session.execute(
            select(c.memory_id, c.tenant, c.user_id, c.created_at).where(
                c.memory_id.in_(memory_ids[start : start + _CHUNK])
            )
        )
        found |= {row.memory_id: Held(row.tenant, row.user_id, row.created_at) for row in rows}
    return found


def held_by(row: dict[str, Any]) -> Held:
    """Return who holds the memory a row stores, as ``holders`` would read it back."""
    return Held(row["tenant"], row["user_id"], row["created_at"])


async def put(session: AsyncSession, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace memory rows (one per memory id)."""
    await upsert(session, memories, rows, ["memory_id"])


async def forget(session: AsyncSession, scope: Scope, memory_id: uuid.UUID) -> list[uuid.UUID]:
    """Delete the user's memory ``memory_id``; return the ids deleted."""
    owned = (memories.c.tenant == scope.tenant) & (memories.c.user_id == scope.user_id)
    return await _delete(session, owned & (memories.c.memory_id == memory_id))


async def end_session(session: AsyncSession, scope: Scope) -> list[uuid.UUID]:
    """Delete the session's conversation memories; return the ids deleted."""
    return await _delete(
        session,
        (memories.c.tenant == scope.tenant)
        & (memories.c.user_id == scope.user_id)
        & (memories.c.session_id == scope.session_id)
        & (memories.c.category == Category.CONVERSATION.value),
    )


async def _delete(session: AsyncSession, where: ColumnElement[bool]) -> list[uuid.UUID]:
    result = await session.execute(delete(memories).where(where).returning(memories.c.memory_id))
    return [row[0] for row in result]


def scope_filter(scope: Scope, search_scope: SearchScope) -> ColumnElement[bool]:
    """Return the SQL condition for memories visible to ``scope`` at ``search_scope``.

    The tenant condition is always present: no search scope crosses tenants.
    """
    condition = (memories.c.tenant == scope.tenant) & (memories.c.namespace == scope.namespace)
    if search_scope is SearchScope.GLOBAL:
        return condition
    condition = condition & (memories.c.user_id == scope.user_id)
    if search_scope is SearchScope.AGENT:
        return condition & (memories.c.agent_id == scope.agent_id)
    if search_scope is SearchScope.SESSION:
        return condition & (memories.c.session_id == scope.session_id)
    return condition


def _unexpired(now: datetime) -> ColumnElement[bool]:
    return or_(memories.c.expires_at.is_(None), memories.c.expires_at > now)


async def visible(
    session: AsyncSession, scope: Scope, search_scope: SearchScope, now: datetime
) -> list[dict[str, Any]]:
    """Return the unexpired memories visible to ``scope``."""
    return unexpired(await in_scope(session, scope, search_scope), now)


async def in_scope(
    session: AsyncSession, scope: Scope, search_scope: SearchScope
) -> list[dict[str, Any]]:
    """Return every memory row visible to ``scope``, expired ones too (see ``unexpired``).

    Recall keeps these between writes of the memories projection, while time moves on.
    """
    rows = await session.execute(select(memories).where(scope_filter(scope, search_scope)))
    return [dict(row._mapping) for row in rows]


def unexpired(rows: Iterable[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """Return the rows whose lifetime has not ended at ``now`` (the ``_unexpired`` rule)."""
    return [row for row in rows if row["expires_at"] is None or stored_utc(row["expires_at"]) > now]


async def listed(
    session: AsyncSession, request: ListMemoriesRequest, now: datetime
) -> tuple[list[dict[str, Any]], int]:
    """Return a page of the unexpired memories the request asks for, and how many there are.

    Most recently changed first (then by id, so pages do not overlap).
    """
    where = [scope_filter(request.scope, request.search_scope), _unexpired(now)]
    if request.categories is not None:
        where.append(memories.c.category.in_([c.value for c in request.categories]))
    total = await session.scalar(select(func.count()).select_from(memories).where(*where))
    rows = await session.execute(
        select(memories)
        .where(*where)
        .order_by(memories.c.updated_at.desc(), memories.c.memory_id)
        .limit(request.limit)
        .offset(request.offset)
    )
    return [dict(row._mapping) for row in rows], int(total or 0)


async def expiring(session: AsyncSession, now: datetime) -> list[dict[str, Any]]:
    """Return the daily memory versions past their lifetime whose expiry is not yet recorded.

    The indexer records expiries (memory_expirations) as it folds them.
    """
    done = and_(
        memory_expirations.c.memory_id == memories.c.memory_id,
        memory_expirations.c.source_event_id == memories.c.source_event_id,
    )
    rows = await session.execute(
        select(memories)
        .outerjoin(memory_expirations, done)
        .where(
            memories.c.category == Category.DAILY.value,
            memories.c.expires_at <= now,
            memory_expirations.c.memory_id.is_(None),
        )
    )
    return [dict(row._mapping) for row in rows]
