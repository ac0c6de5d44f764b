"""The retention sweep: daily memories past their time to live expire, as events.

Expiry depends on a clock, so it is decided live, once, and recorded as ``memory.expired``:
replay folds the recorded expiries and agrees with the live state. An expiry's id derives
from the expiring version's ``memory.remembered`` event, so two sweeps (replicas, restarts)
publish it once within the stream's duplicate window, and ``memory_expirations`` (folded by
the indexer) keeps later sweeps from publishing it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.shared.contracts.events import Event, derived_id
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.stores import memories as memories_store
from memoryd.shared.tasks import cancelled

log = structlog.get_logger(__name__)

Publish = Callable[[Sequence[Event]], Awaitable[object]]


async def due_expiries(session: AsyncSession, now: datetime) -> list[MemoryExpired]:
    """Return an expiry for each daily memory version past its TTL and not yet expired."""
    rows = await memories_store.expiring(session, now)
    return [
        MemoryExpired(
            event_id=derived_id(row["source_event_id"], "memory.expired"),
            occurred_at=now,
            scope=Scope(
                tenant=row["tenant"],
                user_id=row["user_id"],
                agent_id=row["agent_id"],
                session_id=row["session_id"],
                namespace=row["namespace"],
            ),
            memory_id=row["memory_id"],
            source_event_id=row["source_event_id"],
            expires_at=_aware(row["expires_at"]),
        )
        for row in rows
    ]


def _aware(when: datetime) -> datetime:
    # SQLite hands back naive datetimes for timezone-aware columns: they were stored as UTC.
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def sweep_once(
    sessions: async_sessionmaker[AsyncSession], publish: Publish, now: datetime
) -> int:
    """Publish the expiries due at ``now``; return how many."""
    async with sessions() as session:
        due = await due_expiries(session, now)
    if due:
        await publish(due)
        log.info("memories_expired", count=len(due))
    return len(due)


async def sweep_forever(
    sessions: async_sessionmaker[AsyncSession], publish: Publish, every_seconds: float
) -> None:
    """Sweep now and then every ``every_seconds`` until cancelled (a failed sweep is retried)."""
    while True:
        try:
            await sweep_once(sessions, publish, datetime.now(UTC))
        except Exception:
            # The next sweep retries: a sweep only reads and publishes idempotent events.
            log.warning("retention_sweep_failed", exc_info=True)
        await asyncio.sleep(every_seconds)


async def stop(task: asyncio.Task[None]) -> None:
    """Cancel a running sweep and wait for it to end."""
    await cancelled(task)
