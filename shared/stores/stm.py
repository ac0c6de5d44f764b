"""The STM read model: each conversation's FIFO of dialogue pages (stm_pages)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, delete, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import stm_pages
from memoryd.shared.contracts.recall import PageItem
from memoryd.shared.contracts.scope import Scope, SearchScope
from memoryd.shared.domain.stm import ConversationKey, Page

TABLES = (stm_pages,)
_KEYS_PER_QUERY = 200


def page_row(key: ConversationKey, page: Page) -> dict[str, object]:
    """Return the SQL row of a page."""
    return {
        "turn_id": page.turn_id,
        "tenant": key.tenant,
        "user_id": key.user_id,
        "agent_id": key.agent_id,
        "session_id": page.session_id,
        "namespace": page.namespace,
        "query": page.query,
        "response": page.response,
        "occurred_at": page.occurred_at,
        "stream_seq": page.stream_seq,
    }


def page_from_row(row: Mapping[str, Any]) -> Page:
    """Return the page a SQL row holds."""
    return Page(
        turn_id=row["turn_id"],
        session_id=row["session_id"],
        namespace=row["namespace"],
        query=row["query"],
        response=row["response"],
        occurred_at=row["occurred_at"],
        stream_seq=row["stream_seq"],
    )


async def load_fifos(
    session: AsyncSession, keys: Iterable[ConversationKey]
) -> dict[ConversationKey, tuple[Page, ...]]:
    """Load the current FIFO of each conversation in ``keys``, oldest page first."""
    keys = list(keys)
    fifos: dict[ConversationKey, list[Page]] = defaultdict(list)
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        condition = or_(
            *(
                and_(
                    stm_pages.c.tenant == k.tenant,
                    stm_pages.c.user_id == k.user_id,
                    stm_pages.c.agent_id == k.agent_id,
                )
                for k in keys[start : start + _KEYS_PER_QUERY]
            )
        )
        rows = await session.execute(
            select(stm_pages).where(condition).order_by(stm_pages.c.stream_seq)
        )
        for row in rows:
            m = row._mapping
            key = ConversationKey(m["tenant"], m["user_id"], m["agent_id"])
            fifos[key].append(page_from_row(dict(m)))
    return {key: tuple(fifos.get(key, ())) for key in keys}


async def save(
    session: AsyncSession, gone: Sequence[uuid.UUID], new_rows: Sequence[dict[str, object]]
) -> None:
    """Delete the evicted pages and insert the new ones."""
    if gone:
        await session.execute(delete(stm_pages).where(stm_pages.c.turn_id.in_(gone)))
    if new_rows:
        await session.execute(stm_pages.insert(), list(new_rows))


def _seen_from(scope: Scope, search_scope: SearchScope) -> ColumnElement[bool]:
    """Return the SQL condition for the pages a search from ``scope`` sees."""
    condition = (stm_pages.c.tenant == scope.tenant) & (stm_pages.c.user_id == scope.user_id)
    if search_scope is not SearchScope.USER:
        condition = condition & (stm_pages.c.agent_id == scope.agent_id)
    if search_scope is SearchScope.SESSION:
        condition = condition & (stm_pages.c.session_id == scope.session_id)
    return condition


async def conversation_pages(
    session: AsyncSession, scope: Scope, search_scope: SearchScope
) -> list[PageItem]:
    """Return the pages of the caller's conversation (or wider, by search scope), oldest first."""
    rows = await session.execute(
        select(stm_pages).where(_seen_from(scope, search_scope)).order_by(stm_pages.c.stream_seq)
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
