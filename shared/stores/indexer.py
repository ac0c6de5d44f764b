"""The indexer's read models: each conversation's last indexed turn (the next turn's window
joins it) and which daily memory versions have expired (the retention sweep reads it)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import index_last_turns, memory_expirations
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope

TABLES = (memory_expirations, index_last_turns)


async def record_expiries(session: AsyncSession, expired: Sequence[MemoryExpired]) -> None:
    """Record which memory versions expired (the sweep publishes each expiry once)."""
    rows = [
        {
            "memory_id": event.memory_id,
            "source_event_id": event.source_event_id,
            "tenant": event.scope.tenant,
            "user_id": event.scope.user_id,
            "expired_at": event.occurred_at,
        }
        for event in expired
    ]
    await upsert(session, memory_expirations, rows, ["memory_id", "source_event_id"])


async def last_turns(
    session: AsyncSession, conversations: Sequence[uuid.UUID]
) -> dict[uuid.UUID, str]:
    """Return the text of the last indexed turn of each of these conversations that has one."""
    if not conversations:
        return {}
    found = await session.execute(
        select(index_last_turns.c.conversation_id, index_last_turns.c.text).where(
            index_last_turns.c.conversation_id.in_(list(conversations))
        )
    )
    return {row.conversation_id: row.text for row in found}


async def store_last_turns(
    session: AsyncSession,
    owners: Mapping[uuid.UUID, Scope],
    before: Mapping[uuid.UUID, str],
    after: Mapping[uuid.UUID, str],
) -> None:
    """Write the conversations' last turns that changed (``owners``: each one's scope)."""
    rows = [
        {
            "conversation_id": key,
            "tenant": owners[key].tenant,
            "user_id": owners[key].user_id,
            "text": text,
        }
        for key, text in after.items()
        if before.get(key) != text
    ]
    await upsert(session, index_last_turns, rows, ["conversation_id"])
