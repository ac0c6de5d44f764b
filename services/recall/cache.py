"""Per-scope state recall reads on every request, kept while its writer stands still.

A user's segments, persona and graph change only when their projection applies a batch
that changes them, and that projection's version (``tracking.changed``: the sequence of
its last changing batch) then moves; events it does not fold leave it alone. So recall reads
the (one-row) version first and the state only when the version moved: between changes, a
request costs one indexed lookup instead of decoding every segment or counting every
mention. The version is read before the state, so a value is never filed under a newer
version than the one it was read at (at worst a fresh value sits under an older one:
reloaded). Below, "position" is that version.

A projection's version moves with every user's writes, so a value of one user is keyed on
that user's version instead (``tracking.user_versions``): with many users writing, or recall's
own visits folded every few seconds, each user's state stays held until that user's rows
change. ``VersionFeed`` follows those versions: each read asks SQL only for the users changed
since the last one.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.shared import subjects
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.adapters.sql.engine import LoopReadBusy, LoopReads

T = TypeVar("T")
A = TypeVar("A")

# The projections whose read models recall reads: their versions are read once per request.
RECALL_READS = (
    subjects.STM_CONSUMER,
    subjects.MEMORIES_CONSUMER,
    subjects.CHAIN_CONSUMER,
    subjects.MTM_CONSUMER,
    subjects.PERSONA_CONSUMER,
    subjects.GRAPH_CONSUMER,
)
# (tenant, user id): whose state a cached value is; a user id of None is the whole tenant.
User = tuple[str, str | None]
# (consumer, owner key): one user's state in one projection's read models.
Owned = tuple[str, str]


class VersionFeed:
    """Each user's version of the read models recall reads, as far as this process needs it.

    The first read takes each projection's version; every later read, in one statement, the
    versions again and the users changed since the last read (``tracking.read_versions``). A
    user is followed from the first request that asks for them: until their rows change, their
    version is a token of this feed (negative, never given twice), then the sequence of the
    change. A change to a user nobody asked for is passed over: whoever asks later reads after
    it. Past ``max_users`` followed, the least recently asked is dropped (asked again, they
    get a new token, so nothing read before is served). A projection whose version went back
    (its read models rebuilt under a running recall) starts its users again.

    With ``on_loop`` (a SQLite file), the versions are read on the event loop, in one call
    (``LoopReads``), and through a session only while the file is locked.
    """

    def __init__(
        self,
        consumers: tuple[str, ...] = RECALL_READS,
        max_users: int = 100_000,
        on_loop: LoopReads | None = None,
    ) -> None:
        """Follow ``consumers`` (base names: a partition's changes count as its projection's)."""
        self._consumers = consumers
        self._max_users = max_users
        self._on_loop = on_loop
        self._since: dict[str, int] | None = None  # per stored consumer: the last version seen
        self._positions: OrderedDict[Owned, int] = OrderedDict()
        self._tokens = itertools.count(-1, -1)
        self.rows_read = 0  # user rows the feed has read (for tests and figures)

    async def read(self, sessions: async_sessionmaker[AsyncSession]) -> Versions:
        """Return the versions now: each projection's, and each user's when asked."""
        rows = self._read_on_loop()
        if rows is None:
            async with sessions() as session:
                rows = await tracking.read_versions(session, self._since)
        moved, erased = self._follow(rows)
        return Versions(self._wide(rows), self, frozenset(moved), frozenset(erased))

    def _read_on_loop(self) -> list[tracking.VersionRow] | None:
        """Return the rows read on the loop (None: no loop reads, or the file was locked)."""
        if self._on_loop is None:
            return None
        since = self._since
        try:
            return self._on_loop.run(lambda connected: tracking.read_versions_on(connected, since))
        except LoopReadBusy:
            return None

    def position(self, consumer: str, owner: str) -> int:
        """Return the version of ``owner``'s rows in ``consumer``'s read models."""
        key = (consumer, owner)
        position = self._positions.get(key)
        if position is None:
            position = self._positions[key] = next(self._tokens)
            while len(self._positions) > self._max_users:
                self._positions.popitem(last=False)
        else:
            self._positions.move_to_end(key)
        return position

    def _wide(self, rows: list[tracking.VersionRow]) -> dict[str, int]:
        found = dict.fromkeys(self._consumers, 0)
        for row in rows:
            base = subjects.base_consumer(row.consumer)
            if row.owner is None and base in found:
                found[base] += row.sequence
        return found

    def _follow(self, rows: list[tracking.VersionRow]) -> tuple[set[Owned], set[str]]:
        """Take a read's rows; return the followed users (and rebuilt projections' users) that
        moved, and every user erased (followed or not)."""
        since = self._since if self._since is not None else {}
        moved: set[Owned] = set()
        erased: set[str] = set()
        for consumer, owner, sequence, was_erased in rows:
            if owner is None:
                if sequence < since.get(consumer, 0):  # rebuilt: follow its users anew
                    moved |= self._restart(subjects.base_consumer(consumer))
                since[consumer] = sequence
                continue
            self.rows_read += 1
            if was_erased:
                erased.add(owner)
            key = (subjects.base_consumer(consumer), owner)
            if key in self._positions:
                self._positions[key] = sequence
                moved.add(key)
        self._since = since
        return moved, erased

    def _restart(self, consumer: str) -> set[Owned]:
        followed = {key for key in self._positions if key[0] == consumer}
        for key in followed:
            del self._positions[key]
        return followed


@dataclass(frozen=True)
class Versions(Mapping[str, int]):
    """The versions a request reads at: each projection's (``at[consumer]``), and a user's.

    Without a feed (tests, tools) a user's version is the projection's.
    """

    wide: Mapping[str, int]
    feed: VersionFeed | None = None
    moved: frozenset[Owned] = field(default_factory=frozenset)  # users changed in this read
    erased: frozenset[str] = field(default_factory=frozenset)  # owner keys erased since the last

    def __getitem__(self, consumer: str) -> int:
        """Return ``consumer``'s version: it moves with any user's change."""
        return self.wide[consumer]

    def __iter__(self) -> Iterator[str]:
        """Iterate over the consumers."""
        return iter(self.wide)

    def __len__(self) -> int:
        """Return how many consumers there are."""
        return len(self.wide)

    def of(self, consumer: str, user: User | None) -> tuple[int, str | None]:
        """Return the version ``user``'s state is at in ``consumer``'s read models, and the
        owner key it is filed under (None: the tenant's, or any user's, keyed on ``at``)."""
        if user is None or user[1] is None or self.feed is None:
            return self.wide[consumer], None
        owner = tracking.owner_key(user[0], user[1])
        return self.feed.position(consumer, owner), owner


class VersionReads:
    """The versions, read once for all the requests that arrived while the last read ran.

    A request must see every write applied before it arrived (a caller that waited until its
    write was applied recalls it), so it never takes a read that began before it arrived: it
    joins the next read, which starts when the running one ends. Under load one read serves
    every request that queued meanwhile; one caller waits for its own read only.
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


V = TypeVar("V")


class ByOwner(Generic[V]):
    """One value per owner, bounded by the rows all values hold: past ``max_rows``, the owners
    asked least recently go (the last one put stays, however many rows it holds)."""

    def __init__(self, max_rows: int, rows: Callable[[V], int]) -> None:
        """Count a value's rows with ``rows``; hold at most ``max_rows`` rows."""
        self._max_rows = max_rows
        self._rows_of = rows
        self._values: OrderedDict[str, V] = OrderedDict()
        self.rows = 0

    def get(self, owner: str) -> V | None:
        """Return ``owner``'s value (None: none held), as the most recently asked."""
        value = self._values.get(owner)
        if value is not None:
            self._values.move_to_end(owner)
        return value

    def take(self, owner: str) -> V | None:
        """Remove and return ``owner``'s value (None: none held)."""
        value = self._values.pop(owner, None)
        if value is not None:
            self.rows -= self._rows_of(value)
        return value

    def put(self, owner: str, value: V) -> None:
        """Hold ``value`` as ``owner``'s (take the old one first), then keep to the bound."""
        self._values[owner] = value
        self.rows += self._rows_of(value)
        while self.rows > self._max_rows and len(self._values) > 1:
            self.rows -= self._rows_of(self._values.popitem(last=False)[1])

    def forget(self, owners: Iterable[str]) -> None:
        """Drop what is held of ``owners``."""
        for owner in owners:
            self.take(owner)


# An owner's decoded rows: key -> (the text's hash, its value); and their arrangement.
_Decoded = tuple[dict[Hashable, tuple[int, T]], A]


class DecodedRows(Generic[T, A]):
    """Stored texts decoded once per text, grouped by owner and arranged: a reload decodes what
    changed and rearranges from the arrangement before.

    A user's segments are rows of canonical JSON, and a write (a page filed, recall's visits
    counted) changes a few of them: ``of(owner, rows)`` decodes a row only when its text
    differs from the one decoded before under its key and keeps exactly the rows given, so a
    deleted row leaves; it returns ``arrange(values, last)``, ``last`` being the owner's
    arrangement made before (None: none held), which the arrangement may reuse (a visit moves
    segments' heat, not the vectors and keywords their index stacks and posts). Past
    ``max_rows`` rows in all, the owners asked least recently go; ``forget`` drops an owner
    (an erased user) at once.

    A text is compared by Python's string hash, a 64-bit keyed SipHash: two differing texts
    agree on it once in ~1.8e19 (a changed row read as unchanged); blake2b took 5x its time
    (0.60 against 0.12 ms for a user's 200 segments).
    """

    def __init__(
        self,
        decode: Callable[[str], T],
        arrange: Callable[[list[T], A | None], A],
        max_rows: int = 20_000,
    ) -> None:
        """Decode with ``decode``, arrange with ``arrange``; hold at most ``max_rows`` rows (one
        owner's, at least)."""
        self._decode = decode
        self._arrange = arrange
        self._owners: ByOwner[_Decoded[T, A]] = ByOwner(max_rows, lambda held: len(held[0]))
        self.decoded = 0  # texts decoded (for tests and figures)

    def __len__(self) -> int:
        """Return how many rows are held, of every owner."""
        return self._owners.rows

    def of(self, owner: str, rows: Iterable[tuple[Hashable, str]]) -> A:
        """Return the arrangement of ``owner``'s rows ((key, text) pairs), decoded in order."""
        before, last = self._owners.take(owner) or ({}, None)
        now: dict[Hashable, tuple[int, T]] = {}
        for key, text in rows:
            digest = hash(text)
            held = before.get(key)
            if held is None or held[0] != digest:
                held = (digest, self._decode(text))
                self.decoded += 1
            now[key] = held
        arranged = self._arrange([value for _, value in now.values()], last)
        self._owners.put(owner, (now, arranged))
        return arranged

    def forget(self, owners: Iterable[str]) -> None:
        """Drop what is held of ``owners``."""
        self._owners.forget(owners)


class CountedRows(Generic[T]):
    """Each owner's rows in groups that only grow (a segment's filed pages), held while the
    group's count stands: a group whose count moved, or that was never read, is read again.

    A user's segments change with every visit recall records (their heat), which moves the
    user's version and drops what the read cache held of them; a segment's pages change only
    when one is filed, which counts up the segment's ``page_count``. So pages held here are
    checked against the count, not the version. Past ``max_rows`` rows in all, the owners asked
    least recently go; ``forget`` drops an owner (an erased user) at once.
    """

    def __init__(self, max_rows: int = 10_000) -> None:
        """Hold at most ``max_rows`` rows (one owner's, at least)."""
        self._owners: ByOwner[dict[str, list[T]]] = ByOwner(
            max_rows, lambda groups: sum(map(len, groups.values()))
        )
        self.read = 0  # groups read (for tests and figures)

    def __len__(self) -> int:
        """Return how many rows are held, of every owner."""
        return self._owners.rows

    def held(self, owner: str, counts: Mapping[str, int]) -> dict[str, list[T]]:
        """Return ``owner``'s groups held at the given counts (group -> rows; the others are to
        be read and given to ``keep``)."""
        groups = self._owners.get(owner) or {}
        return {
            key: groups[key] for key, count in counts.items() if len(groups.get(key, ())) == count
        }

    def keep(self, owner: str, read: Mapping[str, list[T]]) -> None:
        """Hold the groups just read of ``owner`` (replacing what was held of them)."""
        self._owners.put(owner, (self._owners.take(owner) or {}) | dict(read))
        self.read += len(read)

    def forget(self, owners: Iterable[str]) -> None:
        """Drop what is held of ``owners``."""
        self._owners.forget(owners)


class ReadCache:
    """Values keyed by (consumer, key), each valid at the position it was read at: its user's
    version for a value of one user, else the consumer's."""

    def __init__(self, max_entries: int = 1_000) -> None:
        """Hold at most ``max_entries`` values, dropping the least recently used."""
        self._max_entries = max_entries
        # slot -> (position, value, owner key or None)
        self._entries: OrderedDict[tuple[str, Hashable], tuple[int, Any, str | None]] = (
            OrderedDict()
        )
        self._owned: dict[Owned, set[tuple[str, Hashable]]] = {}  # a user's slots
        self._versions: dict[str, int] = {}  # each consumer's newest version seen
        self._settled: Versions | None = None  # the versions read settled last

    def __len__(self) -> int:
        """Return how many values are held."""
        return len(self._entries)

    async def held(
        self,
        sessions: async_sessionmaker[AsyncSession],
        consumer: str,
        key: Hashable,
        load: Callable[[AsyncSession], Awaitable[T]],
        at: Versions,
        *,
        user: User | None = None,
    ) -> T:
        """Return ``load``'s value at ``at``; open a session only to load it.

        ``user``: whose state the value is (None, or a user id of None: more than one user's,
        held until any change of ``consumer``).
        """
        position, owner = at.of(consumer, user)
        found, value = self.lookup(consumer, key, position)
        if found:
            held: T = value
            return held
        async with sessions() as session:
            fresh = await load(session)
        self.keep(consumer, key, position, fresh, owner)
        return fresh

    def settle(self, at: Versions) -> int:
        """Drop the values a newer version than theirs replaced; return how many (once per
        versions read: a value one of its requests read again after the first settled stays).

        A user's values go when the read ``at`` saw that user change; the others when their
        consumer's version moved past theirs (requests read versions that only grow, so no
        request asks for those values again). Dropping them now, rather than when the least
        recently used go, keeps what a projection has deleted (a forgotten memory, an erased
        user) out of this process's memory once the deletion is recall's newest version.
        """
        if at is self._settled:  # the requests that shared one versions read settle once
            return 0
        self._settled = at
        dropped = 0
        gone = set(at.moved)
        if at.erased:  # what is held of an erased user, whichever version it was read at
            gone |= {owned for owned in self._owned if owned[1] in at.erased}
        for owned in gone:
            for slot in self._owned.pop(owned, ()):
                self._drop(slot)
                dropped += 1
        moved = {c: v for c, v in at.wide.items() if v > self._versions.get(c, 0)}
        if not moved:
            return dropped
        self._versions.update(moved)
        stale = [
            slot
            for slot, (position, _, owner) in self._entries.items()
            if owner is None and position < moved.get(slot[0], 0)
        ]
        for slot in stale:
            self._drop(slot)
        return dropped + len(stale)

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

    def keep(
        self, consumer: str, key: Hashable, position: int, value: object, owner: str | None = None
    ) -> None:
        """Hold ``value``, read at ``position`` (read that position first); ``owner``: the
        user it belongs to (``Versions.of``), None for one held on the consumer's version."""
        slot = (consumer, key)
        self._drop(slot)
        self._entries[slot] = (position, value, owner)
        if owner is not None:
            self._owned.setdefault((consumer, owner), set()).add(slot)
        while len(self._entries) > self._max_entries:
            self._drop(next(iter(self._entries)))

    def _drop(self, slot: tuple[str, Hashable]) -> None:
        held = self._entries.pop(slot, None)
        if held is None or held[2] is None:
            return
        owned = (slot[0], held[2])
        slots = self._owned.get(owned)
        if slots is not None:
            slots.discard(slot)
            if not slots:
                del self._owned[owned]


class RowsByKey:
    """Rows a projection wrote, read by key, held for every request at one version of them.

    ``at(version, scope)`` returns the map of ``scope``'s rows read at ``version`` (its user's
    version, or the projection's for a scope of many users); callers add what they read. A
    request at another version than the held map's gets a new map in its place (a write may
    have changed any row; a request that read its version before the write reads its rows
    after it, so they are never older than the version they are kept at). A scope's map past
    ``max_rows`` starts again, and so does everything past ``max_scopes`` scopes.
    """

    def __init__(self, max_rows: int = 20_000, max_scopes: int = 1_000) -> None:
        """Hold at most ``max_rows`` rows of a scope and ``max_scopes`` scopes."""
        self._max_rows = max_rows
        self._max_scopes = max_scopes
        self._maps: dict[Hashable, tuple[int, dict[Any, Any]]] = {}

    def at(self, version: int, scope: Hashable) -> dict[Any, Any]:
        """Return the rows of ``scope`` held at ``version`` (a map to fill)."""
        held = self._maps.get(scope)
        if held is not None and held[0] == version:
            if len(held[1]) > self._max_rows:
                held[1].clear()
            return held[1]
        if held is None and len(self._maps) >= self._max_scopes:
            self._maps = {}
        rows: dict[Any, Any] = {}
        self._maps[scope] = (version, rows)
        return rows
