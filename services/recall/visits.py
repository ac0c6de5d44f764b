"""Record the segments recall visits: counted in memory, appended to the log per interval.

Heat stays a fold of the log (``segments.visited`` events carry the counts), but the log
grows by at most one event per user per interval however many recalls there are, and a
recall never waits for a log append. What a crash loses is the counts of the interval in
hand (heat a little lower); a stop flushes them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.memoryos import SegmentsVisited

log = structlog.get_logger(__name__)

Publish = Callable[[Event], Awaitable[object]]
RecordVisit = Callable[[SegmentsVisited], Awaitable[object]]
UserKey = tuple[str, str]


@dataclass
class _Tally:
    """The visits of one user since the last flush."""

    last: SegmentsVisited
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, visit: SegmentsVisited) -> None:
        for segment_id, visits in visit.counts().items():
            self.counts[segment_id] = self.counts.get(segment_id, 0) + visits
        if visit.occurred_at >= self.last.occurred_at:
            self.last = visit

    def event(self) -> SegmentsVisited:
        """Return the one event that records this tally (at the last visit's time)."""
        return SegmentsVisited(
            occurred_at=self.last.occurred_at,
            scope=self.last.scope,
            segment_ids=tuple(self.counts),
            visits=tuple(self.counts.values()),
        )


def merge(visits: list[SegmentsVisited]) -> list[SegmentsVisited]:
    """Return one event per user holding the summed counts of ``visits`` (pure)."""
    tallies: dict[UserKey, _Tally] = {}
    for visit in visits:
        user = (visit.scope.tenant, visit.scope.user_id)
        tallies.setdefault(user, _Tally(visit)).add(visit)
    return [tally.event() for tally in tallies.values()]


class VisitRecorder:
    """Append recall's visits to the log, one merged event per user every ``interval`` s.

    ``interval`` 0 appends each visit as it comes (the recall waits for it).
    """

    def __init__(self, record: Publish, interval: float) -> None:
        self._record = record
        self._interval = interval
        self._pending: list[SegmentsVisited] = []
        self._flusher: asyncio.Task[None] | None = None
        self._closing = asyncio.Event()

    async def add(self, visit: SegmentsVisited) -> None:
        """Count ``visit``; it reaches the log with the next flush."""
        if self._interval <= 0:
            await self._record(visit)
            return
        self._pending.append(visit)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_later())

    async def flush(self) -> None:
        """Append what is pending now, one event per user."""
        pending, self._pending = self._pending, []
        for event in merge(pending):
            try:
                await self._record(event)
            except Exception:
                log.warning("visits_not_recorded", user_id=event.scope.user_id, exc_info=True)

    async def close(self) -> None:
        """Flush now and stop waiting (the service is stopping)."""
        self._closing.set()
        if self._flusher is not None:
            await self._flusher
        await self.flush()

    async def _flush_later(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), self._interval)
        await self.flush()
