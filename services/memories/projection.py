"""The explicit-memory projection: remember, forget, and session-end clearing."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.erasure import erase_rows, fold_with_erasures
from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.contracts.events import (
    Event,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    UserErased,
)
from memoryd.shared.contracts.notifications import MemoryUpdated
from memoryd.shared.domain.memories import memory_identity
from memoryd.shared.stores import memories as store

Handler = Callable[[AsyncSession, Event, int], Awaitable[list[MemoryUpdated]]]


class MemoriesProjection:
    """Fold remember / forget / session-ended events into the memories table."""

    consumer = subjects.MEMORIES_CONSUMER
    folds: frozenset[type[Event]] = frozenset(
        {MemoryRemembered, MemoryForgotten, SessionEnded, UserErased}
    )
    decides: frozenset[type[Event]] = frozenset()
    tables = store.TABLES

    def __init__(self, daily_ttl_days: int) -> None:
        self.daily_ttl_days = daily_ttl_days
        self._handlers: dict[type[Event], Handler] = {
            MemoryForgotten: self._forget,  # type: ignore[dict-item]
            SessionEnded: self._end_session,  # type: ignore[dict-item]
        }

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Erase the users the batch erases, then fold its memory events (``_fold_batch``)."""
        return await fold_with_erasures(
            session, batch, live, self._fold_batch, erase_rows(self.tables)
        )

    async def _fold_batch(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Apply the memory events in order: each run of remembers in one read and one write."""
        effects = Effects()
        for run in _runs(batch):
            if isinstance(run[0].event, MemoryRemembered):
                effects.notifications += await self._remember(session, run)
                continue
            for item in run:
                handler = self._handlers[type(item.event)]
                effects.notifications += await handler(session, item.event, item.sequence)
        return effects

    async def _remember(
        self, session: AsyncSession, run: Sequence[Positioned]
    ) -> list[MemoryUpdated]:
        """Store a run of remembers; a later one of the same memory replaces the earlier."""
        remembered = [
            (item.event, item.sequence) for item in run if isinstance(item.event, MemoryRemembered)
        ]
        ids = [memory_identity(event) for event, _ in remembered]
        held = await store.holders(session, ids)
        rows: dict[uuid.UUID, dict[str, Any]] = {}
        notes = []
        for (event, sequence), memory_id in zip(remembered, ids, strict=True):
            holder = held.get(memory_id)
            row = store.memory_row(event, memory_id, holder, sequence, self.daily_ttl_days)
            if row is None:
                continue
            rows[memory_id] = row
            held[memory_id] = store.held_by(row)
            notes.append(notification("memory.stored", event, sequence, [memory_id]))
        await store.put(session, list(rows.values()))
        return notes

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


def _runs(batch: Sequence[Positioned]) -> list[list[Positioned]]:
    """Split a batch into runs of consecutive events of one type, in order."""
    return [list(run) for _, run in itertools.groupby(batch, key=lambda item: type(item.event))]
