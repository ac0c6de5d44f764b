"""Tell subscribers when recall can find an event: every projection it reads has applied it.

Each projection runner of this process reports, after each commit, the last sequence it
handled and the events of the batch. The tracker keeps the recallable events it was told of
(turns, remembered and forgotten memories) by stream sequence, and once the lowest position
over the projections passes one, publishes one ``recallable`` notification for it, through
the notification publisher (so the notification stream keeps it too).

It sees only the runners of its own process: ``bootstrap`` starts it only where every
projection recall reads runs (``memoryd up`` with all components); with projections split
over processes no recallable notice is published.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Positioned
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_notify import NotificationPublisher
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.contracts.events import MemoryForgotten, MemoryRemembered
from memoryd.shared.contracts.notifications import MemoryUpdated, RecallableNotification
from memoryd.shared.domain.memories import memory_identity

# The events a caller may wait on: what it wrote itself and then expects recall to show (the
# catalogue's causes of a recallable notice).
RECALLABLE_EVENTS = RecallableNotification.caused_by
MEMORY_EVENTS = (MemoryRemembered, MemoryForgotten)


def recallable_notice(item: Positioned) -> MemoryUpdated | None:
    """Return the notice that ``item``'s event is recallable, or None for other events."""
    event = item.event
    if not isinstance(event, RECALLABLE_EVENTS):
        return None
    items = (memory_identity(event),) if isinstance(event, MEMORY_EVENTS) else ()
    return notification("recallable", event, item.sequence, items)


class RecallableTracker:
    """The projections' positions, and the recallable events not every one has applied."""

    def __init__(self, consumers: Iterable[str], notifier: NotificationPublisher) -> None:
        self._positions = dict.fromkeys(consumers, 0)
        self._pending: dict[int, MemoryUpdated] = {}
        self._notifier = notifier

    async def load(self, readers: async_sessionmaker[AsyncSession]) -> None:
        """Start from the projections' tracking rows (an idle one reports nothing)."""
        async with readers() as session:
            self._positions = await tracking.positions(session, list(self._positions))

    async def applied(self, consumer: str, through: int, batch: Sequence[Positioned]) -> None:
        """Record that ``consumer`` committed ``batch`` up to ``through``; notify what is due."""
        due = self.advance(consumer, through, batch)
        if due:
            await self._notifier.publish(due)

    def advance(
        self, consumer: str, through: int, batch: Sequence[Positioned]
    ) -> list[MemoryUpdated]:
        """Record a commit; return the notices every projection has now passed, in log order.

        An event at or below the lowest position was passed by every projection before
        (notified then, or lost to a crash before the publish): it is not notified again.
        """
        self._hold(batch, self._floor())
        if consumer in self._positions:
            self._positions[consumer] = max(self._positions[consumer], through)
        floor = self._floor()
        return [self._pending.pop(s) for s in sorted(self._pending) if s <= floor]

    def _hold(self, batch: Sequence[Positioned], floor: int) -> None:
        for item in batch:
            note = recallable_notice(item) if item.sequence > floor else None
            if note is not None:
                self._pending.setdefault(item.sequence, note)

    def _floor(self) -> int:
        return min(self._positions.values(), default=0)

    @property
    def pending(self) -> int:
        """Return how many recallable events wait for a projection."""
        return len(self._pending)


def tracks_recall(consumers: Iterable[str]) -> bool:
    """Return whether ``consumers`` include every projection recall reads."""
    return set(subjects.PROJECTION_CONSUMERS) <= set(consumers)
