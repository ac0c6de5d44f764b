"""Admission control for recall: a bounded number in hand, a bounded queue, refusals at once.

Past capacity a request is refused the moment it arrives (``overloaded``), so a caller can
back off or try a replica instead of waiting out its timeout; a request whose deadline
passes while it waits is dropped before any work is done on it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from memoryd.shared.settings import Settings


class DeadlinePassed(Exception):
    """The request's deadline passed before a worker was free."""


class Admission:
    """Let ``workers`` requests run at once and ``backlog`` more wait; refuse the rest."""

    def __init__(self, workers: int, backlog: int) -> None:
        """Run ``workers`` at once; queue at most ``backlog`` behind them."""
        self._slots = asyncio.Semaphore(workers)
        self._workers = workers
        self._backlog = backlog
        self._in_hand = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Admission:
        """Admit what ``recall_concurrency`` and ``recall_backlog`` allow."""
        return cls(settings.recall_concurrency, settings.recall_backlog)

    @property
    def capacity(self) -> int:
        """Return how many requests may be in hand at once, running or waiting."""
        return self._workers + self._backlog

    def has_room(self) -> bool:
        """Say whether one more request may run or wait."""
        return self._in_hand < self.capacity

    @asynccontextmanager
    async def slot(self, wait: float | None) -> AsyncIterator[None]:
        """Hold a worker slot, waiting at most ``wait`` seconds for one (None: no limit)."""
        self._in_hand += 1
        try:
            try:
                await asyncio.wait_for(self._slots.acquire(), wait)
            except TimeoutError as late:
                raise DeadlinePassed from late
            try:
                yield
            finally:
                self._slots.release()
        finally:
            self._in_hand -= 1
