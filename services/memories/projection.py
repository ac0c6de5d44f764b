"""The explicit-memory projection: remember, forget, and session-end clearing."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.contracts.events import (
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
)
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.domain.memories import memory_identity
from memoryd.shared.stores import memories as store

Handler = Callable[[AsyncSession, Event, int], Awaitable[list[MemoryUpdated]]]


class MemoriesProjection:
    """Fold remember / forget / session-ended events into the memories table."""

    consumer = subjects.MEMORIES_CONSUMER
    tables = store.TABLES

    def __init__(self, daily_ttl_days: int) -> None:
        self.daily_ttl_days = daily_ttl_days
        self._handlers: dict[type[Event], Handler] = {
            MemoryRemembered: self._remember,  # type: ignore[dict-item]
            MemoryForgotten: self._forget,  # type: ignore[dict-item]
            SessionEnded: self._end_session,  # type: ignore[dict-item]
        }

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply each memory event in order (they are few next to turns: no bulk path)."""
        effects = Effects()
        for item in batch:
            handler = self._handlers.get(type(item.event))
            if handler is not None:
                effects.notifications += await handler(session, item.event, item.sequence)
        return effects

    async def _remember(
        self, session: AsyncSession, event: MemoryRemembered, sequence: int
    ) -> list[MemoryUpdated]:
        memory_id = memory_identity(event)
        holder = await store.held(session, memory_id)
        row = store.memory_row(event, memory_id, holder, sequence, self.daily_ttl_days)
        if row is None:
            return []
        await store.put(session, row)
        return [notification("memory.stored", event, sequence, [memory_id])]

    async def _forget(
        self, session: AsyncSession, event: MemoryForgotten, sequence: int
    ) -> list[MemoryUpdated]:
        gone = await store.forget(session, event.scope, memory_identity(event))
        return [notification("memory.forgotten", event, sequence, gone)] if gone else []

    async def _end_session(
        self, session: AsyncSession, event: SessionEnded, sequence: int
    ) -> list[MemoryUpdated]:
        gone = await store.end_session(session, event.scope)
        return [notification("session.cleared", event, sequence, gone)]
