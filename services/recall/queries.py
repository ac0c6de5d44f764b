"""Read-side queries of the recall service (it only reads)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import memories, stm_pages
from memoryd.shared.contracts.recall import PageItem
from memoryd.shared.contracts.scope import Scope, SearchScope


def memory_scope_filter(scope: Scope, search_scope: SearchScope) -> ColumnElement[bool]:
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


async def conversation_pages(
    session: AsyncSession, scope: Scope, search_scope: SearchScope
) -> list[PageItem]:
    """Return the STM pages of the caller's conversation, oldest first."""
    condition = (stm_pages.c.tenant == scope.tenant) & (stm_pages.c.user_id == scope.user_id)
    if search_scope is not SearchScope.USER:
        condition = condition & (stm_pages.c.agent_id == scope.agent_id)
    if search_scope is SearchScope.SESSION:
        condition = condition & (stm_pages.c.session_id == scope.session_id)
    rows = await session.execute(
        select(stm_pages).where(condition).order_by(stm_pages.c.stream_seq)
    )
    return [
        PageItem(
            turn_id=row.turn_id,
            session_id=row.session_id,
            agent_id=row.agent_id,
            query=row.query,
            response=row.response,
            occurred_at=row.occurred_at,
        )
        for row in rows
    ]


async def candidate_memories(
    session: AsyncSession, scope: Scope, search_scope: SearchScope, now: datetime
) -> list[dict[str, Any]]:
    """Return the unexpired memories visible to ``scope``."""
    rows = await session.execute(
        select(memories).where(
            memory_scope_filter(scope, search_scope),
            or_(memories.c.expires_at.is_(None), memories.c.expires_at > now),
        )
    )
    return [dict(row._mapping) for row in rows]
