"""The explicit-memory projection: remember, forget, and session-end clearing."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.adapters.sql.tables import memories
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
)
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.domain.memories import expires_at, memory_identity


def _note(kind: str, event: AnyEvent, sequence: int, ids: Sequence[object]) -> MemoryUpdated:
    return MemoryUpdated(
        kind=kind,
        tenant=event.scope.tenant,
        user_id=event.scope.user_id,
        agent_id=event.scope.agent_id,
        session_id=event.scope.session_id,
        event_id=event.event_id,
        stream_seq=sequence,
        item_ids=tuple(ids),
    )


class MemoriesProjection:
    """Fold remember / forget / session-ended events into the memories table."""

    consumer = subjects.MEMORIES_CONSUMER
    tables = (memories,)

    def __init__(self, daily_ttl_days: int) -> None:
        self.daily_ttl = timedelta(days=daily_ttl_days)

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply each memory event in order (they are few next to turns: no bulk path)."""
        effects = Effects()
        for item in batch:
            event = item.event
            if isinstance(event, MemoryRemembered):
                await self._remember(session, event, item.sequence)
                effects.notifications.append(
                    _note("memory.stored", event, item.sequence, [memory_identity(event)])
                )
            elif isinstance(event, MemoryForgotten):
                gone = await self._forget(session, event)
                if gone:
                    effects.notifications.append(
                        _note("memory.forgotten", event, item.sequence, gone)
                    )
            elif isinstance(event, SessionEnded):
                gone = await self._end_session(session, event)
                effects.notifications.append(_note("session.cleared", event, item.sequence, gone))
        return effects

    async def _remember(self, session: AsyncSession, event: MemoryRemembered, seq: int) -> None:
        scope = event.scope
        memory_id = memory_identity(event)
        owner = await session.execute(
            select(memories.c.tenant, memories.c.user_id, memories.c.created_at).where(
                memories.c.memory_id == memory_id
            )
        )
        existing = owner.first()
        if existing is not None and (existing.tenant, existing.user_id) != (
            scope.tenant,
            scope.user_id,
        ):
            return  # an id owned by another user is never overwritten across scopes
        created_at = existing.created_at if existing is not None else event.occurred_at
        await upsert(
            session,
            memories,
            [
                {
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
                    "created_at": created_at,
                    "updated_at": event.occurred_at,
                    "expires_at": expires_at(
                        event.category, event.occurred_at, self.daily_ttl.days
                    ),
                    "source_event_id": event.event_id,
                    "stream_seq": seq,
                }
            ],
            ["memory_id"],
        )

    async def _forget(self, session: AsyncSession, event: MemoryForgotten) -> list[object]:
        scope = event.scope
        owned = (memories.c.tenant == scope.tenant) & (memories.c.user_id == scope.user_id)
        # By key or by id, a forget names one identity: the same one the index and graph drop.
        where = owned & (memories.c.memory_id == memory_identity(event))
        result = await session.execute(
            delete(memories).where(where).returning(memories.c.memory_id)
        )
        return [row[0] for row in result]

    async def _end_session(self, session: AsyncSession, event: SessionEnded) -> list[object]:
        scope = event.scope
        result = await session.execute(
            delete(memories)
            .where(
                (memories.c.tenant == scope.tenant)
                & (memories.c.user_id == scope.user_id)
                & (memories.c.session_id == scope.session_id)
                & (memories.c.category == Category.CONVERSATION.value)
            )
            .returning(memories.c.memory_id)
        )
        return [row[0] for row in result]
