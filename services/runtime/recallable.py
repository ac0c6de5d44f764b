"""Tell subscribers when recall can find an event: every projection it reads has applied it.

Each projection runner of this process reports, after each commit, the last sequence it
handled and the events of the batch. The tracker keeps the recallable events it was told of
(turns, remembered and forgotten memories) by stream sequence, and once every projection
that folds the event's type has passed it, publishes one ``recallable`` notification for
it, through the notification publisher (so the notification stream keeps it too).

It sees only the runners of its own process: ``bootstrap`` starts it only where every
projection recall reads runs (``memoryd up`` with all components); with projections split
over processes no recallable notice is published.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.runtime.notify import notification
from memoryd.services.runtime.projection import Positioned, Projection, folds_event
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_notify import NotificationPublisher
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.contracts.events import Event, MemoryForgotten, MemoryRemembered
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
    """The projections' positions, and the recallable events not every reader has applied.

    An event waits only for the projections that fold it (its type, in its user's partition):
    each reads only those, and its position moves only when one comes. Events with the same
    readers wait in one heap by sequence: once the slowest of those readers passes one, it
    has passed every one before it, so a commit looks only at what it makes due (with a
    backlog, the pending events were scanned and sorted on every commit of every worker).
    """

    def __init__(self, projections: Sequence[Projection], notifier: NotificationPublisher) -> None:
        self._projections = {projection.consumer: projection for projection in projections}
        self._positions = dict.fromkeys(self._projections, 0)
        self._waiting: dict[tuple[str, ...], list[tuple[int, MemoryUpdated]]] = {}
        self._held: set[int] = set()
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
        """Record a commit; return the notices every reader has now passed, in log order.

        An event every reader had passed before this commit was notified then (or lost to a
        crash before the publish): it is not notified again.
        """
        self._hold(batch)
        if consumer in self._positions:
            self._positions[consumer] = max(self._positions[consumer], through)
        due: list[tuple[int, MemoryUpdated]] = []
        for readers, waiting in self._waiting.items():
            passed = self._slowest(readers)
            while waiting and waiting[0][0] <= passed:
                due.append(heapq.heappop(waiting))
        due.sort(key=lambda entry: entry[0])
        self._held.difference_update(sequence for sequence, _ in due)
        return [note for _, note in due]

    def _hold(self, batch: Sequence[Positioned]) -> None:
        for item in batch:
            if item.sequence in self._held:
                continue
            note = recallable_notice(item)
            readers = self._readers(item.event)
            if note is not None and item.sequence > self._slowest(readers):
                heapq.heappush(self._waiting.setdefault(readers, []), (item.sequence, note))
                self._held.add(item.sequence)

    def _readers(self, event: Event) -> tuple[str, ...]:
        return tuple(c for c, p in self._projections.items() if folds_event(p, event))

    def _slowest(self, readers: tuple[str, ...]) -> int | float:
        """Return the lowest position among ``readers`` (no reader: every event passed)."""
        return min((self._positions[c] for c in readers), default=float("inf"))

    @property
    def pending(self) -> int:
        """Return how many recallable events wait for a projection."""
        return len(self._held)


def tracks_recall(consumers: Iterable[str]) -> bool:
    """Return whether ``consumers`` include every projection recall reads (every partition
    of each, when the log is partitioned: the caller runs them all)."""
    return set(subjects.PROJECTION_CONSUMERS) <= {subjects.base_consumer(c) for c in consumers}
