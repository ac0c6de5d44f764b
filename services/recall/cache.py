"""Per-scope state recall reads on every request, kept while its writer stands still.

A user's segments, persona and graph change only when their projection applies a batch
that changes them, and that projection's version (``tracking.versions``: the sequence of
its last changing batch) then moves; events it does not fold leave it alone. So recall reads
the (one-row) version first and the state only when the version moved: between changes, a
request costs one indexed lookup instead of decoding every segment or counting every
mention. The version is read before the state, so a value is never filed under a newer
version than the one it was read at (at worst a fresh value sits under an older one:
reloaded). Below, "position" is that version.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.shared import subjects
from memoryd.shared.adapters.sql import tracking

T = TypeVar("T")

# The projections whose read models recall reads: their versions are read once per request.
RECALL_READS = (
    subjects.STM_CONSUMER,
    subjects.MEMORIES_CONSUMER,
    subjects.CHAIN_CONSUMER,
    subjects.MTM_CONSUMER,
    subjects.PERSONA_CONSUMER,
    subjects.GRAPH_CONSUMER,
)
Versions = Mapping[str, int]


async def read_versions(sessions: async_sessionmaker[AsyncSession]) -> Versions:
    """Return the versions of every read model recall reads, in one query.

    Read at the start of a request, before any state they guard.
    """
    async with sessions() as session:
        return await tracking.versions(session, RECALL_READS)


class VersionReads:
    """The versions, read once for all the requests that arrived while the last read ran.

    A request must see every write applied before it arrived (a caller that waited until its
    write was applied recalls it), so it never takes a read that began before it arrived: it
    joins the next read, which starts when the running one ends. Under load one read (a
    session and a statement through the SQL driver's thread: ~2 ms of process CPU, both
    threads counted) serves every request that queued meanwhile; one caller waits for its own
    read only.
    """

    def __init__(self, read: Callable[[], Awaitable[Versions]]) -> None:
        """Share the reads of ``read`` (e.g. ``lambda: read_versions(sessions)``)."""
        self._read = read
        self._next: asyncio.Future[Versions] | None = None  # the read not yet begun
        self._reader: asyncio.Task[None] | None = None
        self.reads = 0  # how many reads were made (for tests and figures)

    async def __call__(self) -> Versions:
        """Return versions read after this call began."""
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            if self._reader is None or self._reader.done():
                self._reader = asyncio.create_task(self._read_each())
        return await asyncio.shield(self._next)

    async def _read_each(self) -> None:
        while self._next is not None:
            future, self._next = self._next, None
            self.reads += 1
            try:
                future.set_result(await self._read())
            except asyncio.CancelledError:
                for waiting in (future, self._next):
                    if waiting is not None:
                        waiting.cancel()
                self._next = None
                raise
            except Exception as error:  # every request that joined this read gets it
                future.set_exception(error)
                future.exception()  # retrieved: the waiters raise it, nobody logs it twice


class ReadCache:
    """Values keyed by (consumer, key), each valid at the consumer's position it was read at."""

    def __init__(self, max_entries: int = 1_000) -> None:
        """Hold at most ``max_entries`` values, dropping the least recently used."""
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, Hashable], tuple[int, Any]] = OrderedDict()
        self._versions: dict[str, int] = {}  # each consumer's newest version seen

    def __len__(self) -> int:
        """Return how many values are held."""
        return len(self._entries)

    async def read(
        self,
        session: AsyncSession,
        consumer: str,
        key: Hashable,
        load: Callable[[AsyncSession], Awaitable[T]],
        *,
        position: int | None = None,
    ) -> T:
        """Return ``load(session)``'s value, from memory if ``consumer`` has not moved since.

        ``position`` is the consumer's position when the caller read it already (before
        anything it guards); otherwise it is read here.
        """
        if position is None:
            position = (await tracking.versions(session, [consumer]))[consumer]
        found, value = self.lookup(consumer, key, position)
        if found:
            held: T = value
            return held
        fresh = await load(session)
        self.keep(consumer, key, position, fresh)
        return fresh

    async def held(
        self,
        sessions: async_sessionmaker[AsyncSession],
        consumer: str,
        key: Hashable,
        load: Callable[[AsyncSession], Awaitable[T]],
        at: Versions,
    ) -> T:
        """Return ``load``'s value at ``at[consumer]``; open a session only to load it."""
        position = at[consumer]
        found, value = self.lookup(consumer, key, position)
        if found:
            held: T = value
            return held
        async with sessions() as session:
            fresh = await load(session)
        self.keep(consumer, key, position, fresh)
        return fresh

    def settle(self, at: Versions) -> int:
        """Drop the values read before a consumer's version ``at`` names; return how many.

        Requests read versions that only grow, so no request asks for those values again.
        Dropping them now, rather than when the least recently used go, keeps what a
        projection has deleted (a forgotten memory, an erased user) out of this process's
        memory once the deletion is recall's newest version.
        """
        moved = {c: v for c, v in at.items() if v > self._versions.get(c, 0)}
        if not moved:
            return 0
        self._versions.update(moved)
        stale = [slot for slot, held in self._entries.items() if held[0] < moved.get(slot[0], 0)]
        for slot in stale:
            del self._entries[slot]
        return len(stale)

    def lookup(self, consumer: str, key: Hashable, position: int) -> tuple[bool, Any]:
        """Return (True, value) if a value read at ``position`` is held, else (False, None).

        For callers that read the position once for several keys.
        """
        slot = (consumer, key)
        held = self._entries.get(slot)
        if held is None or held[0] != position:
            return False, None
        self._entries.move_to_end(slot)
        return True, held[1]

    def keep(self, consumer: str, key: Hashable, position: int, value: object) -> None:
        """Hold ``value``, read at ``position`` of ``consumer`` (read that position first)."""
        self._keep((consumer, key), position, value)

    def _keep(self, slot: tuple[str, Hashable], position: int, value: object) -> None:
        self._entries[slot] = (position, value)
        self._entries.move_to_end(slot)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)


class RowsByKey:
    """Rows a projection wrote, read by key, held for every request at one of its versions.

    ``at(version, scope)`` returns the map of ``scope``'s rows read at ``version``; callers add
    what they read. A newer version empties every map (a write may have changed any row); a
    request at an older version gets a map of its own that nobody keeps, so a row read
    before a write is never served after it. A scope's map past ``max_rows`` starts again,
    and so does everything past ``max_scopes`` scopes.
    """

    def __init__(self, max_rows: int = 20_000, max_scopes: int = 1_000) -> None:
        """Hold at most ``max_rows`` rows of a scope and ``max_scopes`` scopes."""
        self._max_rows = max_rows
        self._max_scopes = max_scopes
        self._version = -1
        self._maps: dict[Hashable, dict[Any, Any]] = {}

    def at(self, version: int, scope: Hashable) -> dict[Any, Any]:
        """Return the rows of ``scope`` held at ``version`` (a map to fill)."""
        if version < self._version:
            return {}
        if version > self._version or (
            scope not in self._maps and len(self._maps) >= self._max_scopes
        ):
            self._version, self._maps = version, {}
        rows = self._maps.setdefault(scope, {})
        if len(rows) > self._max_rows:
            rows.clear()
        return rows
