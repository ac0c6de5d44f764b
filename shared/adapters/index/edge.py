"""Search index on Qdrant Edge: the Qdrant engine in this process or in its index host."""

import asyncio
import math
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import structlog

from memoryd.shared.adapters.index._mapping import (
    DecodedPoints,
    best_first,
    dense_bytes,
    past_the_cut,
    point_from_stored,
    scope_conditions,
)
from memoryd.shared.adapters.index.edge_build import Generations, optimise_in_child
from memoryd.shared.adapters.index.edge_engine import (
    Count,
    Delete,
    DeleteWhere,
    Flush,
    Info,
    NearestDense,
    NearestSparse,
    Operation,
    Optimize,
    Retrieve,
    Scored,
    Scroll,
    ShardInfo,
    ShardSpec,
    Store,
    StoredPoint,
)
from memoryd.shared.adapters.index.edge_host import HostedShards, HostExited, InlineShards, Shards
from memoryd.shared.adapters.index.port import DenseVector, Hit, IndexPoint, ScopeFilter
from memoryd.shared.adapters.index.sparse import DEFAULT_AVG_LEN, query_vector

__all__ = ["EdgeOptions", "EdgeSearchIndex", "Optimizing", "build_after", "search_threads"]

_log = structlog.get_logger(__name__)
_Result = TypeVar("_Result")
# Points outside any HNSW that make a quiet spell worth an optimisation: Edge's optimiser
# indexes a segment only past 10,000 KB of vectors (6,667 points of 384 floats).
QUIET_POINTS = 7_000
# No write and no search for this long: a steady ingest pauses for seconds while its batches
# are embedded. With 2 s and 2,000 written points, five optimisations started while 5,000 turns
# were written here, each taking a core from the model for 1.1-3.9 s. Searches count too: an
# optimisation of 20,000 new points at 250,000 (1.6 cores for 7-10 s) beside one recall caller
# at 100,000 turns over 100 users took its p50 from 22.5 to 37.2 ms, p99 from 41.6 to 77.1 ms
# (max 447 ms), and at the lowest CPU priority still to 34.9 and 64.0 ms; a tail left outside
# the HNSW costs a search far less (its user's points there are found by the payload index).
QUIET_SECONDS = 10.0
# But not for ever while most points are outside any HNSW: searches hold the quiet spell's
# optimisation off for at most this long after the last write. One scope of 5,000 turns
# (~12,100 points) searched without pause stayed a scan: 50 callers got 176-189 recalls/s from
# it, 255-264 from the same folder optimised.
LATEST_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class Optimizing:
    """When an Edge index optimises by itself, and where (see ``EdgeSearchIndex``).

    ``every``: after that many upserted points (None: only when asked). ``in_background``: in
    a child process on a copy, after fewer while the index is small (``build_after``), and
    also after ``quiet_seconds`` without a write or a search when at least ``quiet_points``
    points are outside any HNSW; searches hold it off no later than ``latest_seconds`` after
    the last write while those are most of the points.
    """

    every: int | None = None
    in_background: bool = False
    quiet_points: int = QUIET_POINTS
    quiet_seconds: float = QUIET_SECONDS
    latest_seconds: float = LATEST_SECONDS

    def __post_init__(self) -> None:
        """Refuse counts and spells that are not positive, and a latest before the spell."""
        for name in ("every", "quiet_points", "quiet_seconds", "latest_seconds"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if self.latest_seconds < self.quiet_seconds:
            raise ValueError(
                f"latest_seconds ({self.latest_seconds}) must be at least quiet_seconds "
                f"({self.quiet_seconds})"
            )


@dataclass(frozen=True, slots=True)
class EdgeOptions:
    """How an Edge index optimises, lays out and hosts its shard (see ``EdgeSearchIndex``)."""

    optimizing: Optimizing = Optimizing()
    segment_points: int | None = None
    payloads_in_ram: bool = False
    hosted: bool = False


def build_after(policy: Optimizing, indexed: int) -> int | None:
    """Return after how many upserted points an optimisation runs (None: only when asked).

    In this process, after ``every`` exactly (a bulk load's index is then the same from run
    to run). In the background, once the new points are ``quiet_points`` and half the
    ``indexed`` ones (those in an HNSW), at most ``every``: a build costs the child a load of
    the whole index, a search pays for the points outside an HNSW, so a small index is built
    sooner and a large one no more often than before. A first fill of 5,000 turns (~12,000
    points) then builds at 7,000 instead of waiting for its quiet spell: searched by 50
    callers right after, two runs each way here gave 86.2 and 95.7 recalls/s against 74.6 and
    81.4, one caller p50 43.0 and 40.1 ms against 46.1 and 49.9. At 10,000 turns the builds
    come at ~7,000, 14,000 and 21,000 points, not 20,000: the service's processes held 809
    and 814 MB at once during the fill, against 910 (the optimising child 178 against 214).
    """
    if policy.every is None or not policy.in_background:
        return policy.every
    return min(policy.every, max(policy.quiet_points, indexed // 2))


def search_threads(cores: int | None) -> int:
    """Return the threads Edge searches a shard's segments with: one per core.

    Edge's own default counts CPUs its own way: eight on these 2-core machines, which under
    50 callers cost the index host 4.4 ms of CPU a dense search at 12,620 points against
    ~2.5 on one or two threads. Two answer a lone caller sooner than one (1.57 against 2.55
    ms, 2.44 against 2.54 ms of CPU).
    """
    return max(1, cores or 1)


class EdgeSearchIndex:
    """Search index on a Qdrant Edge shard in a local folder.

    The shard runs in this process, or with ``hosted`` in a child process, the index host
    (``edge_host``): Edge holds the GIL while it searches, so in this process every search
    stops the event loop for as long as the engine works; hosted, the loop goes on with other
    requests meanwhile and the engine runs on another core. Either way the same operations
    (``edge_engine``) are applied, in the order asked.

    Edge never optimises by itself: points are searchable as soon as they are upserted, but
    they sit in unindexed segments (searched by brute force: 1.4 ms a dense search at 12,620
    points in one scope, 0.4 ms with the HNSW) until an optimisation runs. `optimize()` runs one
    here and now (after a bulk load). With `Optimizing.every`, one runs after every that many
    upserted points; `Optimizing.in_background` (the service's way) runs those, and one after a
    quiet spell (`quiet_seconds` without a write or a read, `quiet_points` outside any HNSW;
    while most points are outside one, reads postpone it to `latest_seconds` after the last
    write at most), in a child process on a copy of the shard (`edge_build`), since Edge holds
    the GIL while it optimises (2.2 s at 12,620 points): the copy is loaded, the writes taken
    meanwhile replayed on it, and it replaces the shard. Writes run one at a time.

    `segment_points` bounds a segment's size (about that many points): without a bound the
    optimiser merged every new point into one segment and rebuilt its HNSW, so each pass
    took longer as the index grew, with the GIL held throughout (random 384-d vectors, one
    pass per 20,000 points: 15.5, 44.7, 50.4 s unbounded; 15.4, 15.2, 16.4 s bounded at
    20,000). Bounded, a pass indexes only what is new; a dense search goes over a few more
    segments (60,000 points in one scope: p50 5.8 ms against 4.0 ms; sparse 1.7 ms either way).
    """

    def __init__(
        self,
        path: str | Path,
        dimension: int,
        *,
        avg_len: float = DEFAULT_AVG_LEN,
        optimizing: Optimizing = Optimizing(),
        segment_points: int | None = None,
        payloads_in_ram: bool = False,
        hosted: bool = False,
    ) -> None:
        """Describe the index; nothing is opened (nor any host started) until
        `ensure_collection()`."""
        if dimension <= 0:
            raise ValueError(f"dimension must be positive, got {dimension}")
        if segment_points is not None and segment_points <= 0:
            raise ValueError(f"segment_points must be positive, got {segment_points}")
        self._generations = Generations(Path(path))
        self._dimension = dimension
        self._avg_len = avg_len
        self._optimizing = optimizing
        self._segment_points = segment_points
        self._payloads_in_ram = payloads_in_ram
        self._hosted = hosted
        self._upserted_since_optimize = 0
        self._indexed = 0  # points in an HNSW at the last look (``build_after``)
        self._shards: Shards | None = None
        self._shard: int | None = None  # the open shard's number
        self._folder: Path | None = None  # the generation the shard was loaded from
        # One write at a time; a background optimisation holds it while it copies and switches.
        self._writing = asyncio.Lock()
        # The writes applied since the copy a background optimisation works on, in order (read
        # and written only under ``_writing``).
        self._taken: list[Operation[Any]] | None = None
        self._building: asyncio.Task[None] | None = None
        self._quiet: asyncio.TimerHandle | None = None
        self._quiet_check: asyncio.Task[None] | None = None
        self._last_read = -math.inf  # time.monotonic() of the last read begun
        self._last_write = -math.inf  # time.monotonic() of the last write ended
        self._decoded = DecodedPoints()
        self._cold = True  # the last search found points whose payloads were not held
        # Two concurrent first calls would otherwise both create (or load) the same folder.
        self._opening = asyncio.Lock()

    @property
    def host_pid(self) -> int | None:
        """Return the process id of the index host (None: not hosted, or not open)."""
        return self._shards.pid if isinstance(self._shards, HostedShards) else None

    async def ensure_collection(self) -> None:
        """Open the shard at the path, creating it and any missing payload index.

        Hosted, the index host is started first. Opening counts as a write for the quiet
        spell: points a run before left outside any HNSW are optimised after one, as if just
        written.
        """
        async with self._opening:
            if self._shard is not None:
                return
            self._generations.home.mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(self._generations.clean)
            shards = await self._started_shards()
            try:
                folder = self._generations.current()
                self._shard = await self._open(shards, folder)
            except BaseException:
                await shards.stop()
                raise
            self._shards, self._folder = shards, folder
            if self._optimizing.every is not None:
                await self._unindexed()
                self._wait_for_quiet()

    async def _started_shards(self) -> Shards:
        if not self._hosted:
            return InlineShards()
        host = HostedShards()
        await host.start()
        return host

    async def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert the points, replacing any point with the same id."""
        await self._upsert(points, only_changed=False)

    async def upsert_changed(self, points: Sequence[IndexPoint]) -> int:
        """Write the points that differ from what is stored under their ids; return how many."""
        return await self._upsert(points, only_changed=True)

    async def _upsert(self, points: Sequence[IndexPoint], only_changed: bool) -> int:
        """Write the points (or those that changed); return how many.

        Their payloads are laid out in a worker thread; digests and BM25 vectors are made
        where the shard is (``Store``).
        """
        if not points:
            return 0
        stored = await asyncio.to_thread(self._stored, points)
        operation = Store(stored, self._avg_len, only_changed)
        written = await self._write(operation, [point.id for point in points])
        self._upserted_since_optimize += written
        await self._after_write(written)
        return written

    def _stored(self, points: Sequence[IndexPoint]) -> tuple[StoredPoint, ...]:
        """Return the points as the engine stores them, refusing a wrong or non-finite vector."""
        return tuple(
            StoredPoint(
                point.id,
                dense_bytes(point.dense, self._dimension),
                point.text,
                point.payload.model_dump(mode="json"),
            )
            for point in points
        )

    async def _after_write(self, written: int) -> None:
        """Optimise if ``Optimizing.every`` points were written; else wait for a quiet spell."""
        policy = self._optimizing
        if policy.every is None or written == 0:
            return
        due = build_after(policy, self._indexed)
        if due is not None and self._upserted_since_optimize >= due:
            if policy.in_background:
                self._build_in_background()
            else:
                await self.optimize()
            return
        self._wait_for_quiet()

    def _wait_for_quiet(self) -> None:
        """Start the quiet spell over from now (background optimisation only)."""
        if not self._optimizing.in_background:
            return
        self._last_write = time.monotonic()
        if self._quiet is not None:
            self._quiet.cancel()
        loop = asyncio.get_running_loop()
        self._quiet = loop.call_later(self._optimizing.quiet_seconds, self._quiet_spell_ended)

    def _quiet_spell_ended(self) -> None:
        self._quiet = None
        if self._quiet_check is None or self._quiet_check.done():
            self._quiet_check = asyncio.create_task(self._build_when_worth_it())

    async def _build_when_worth_it(self) -> None:
        """After a quiet spell: optimise if enough points are outside any HNSW.

        A write still under way is no quiet spell (it was armed when the write before it
        ended): that write arms the timer again when it ends. A read in the spell moves its
        end to ``quiet_seconds`` after that read, but no later than ``latest_seconds`` after
        the last write while most points are outside any HNSW; when most are in one, reads
        keep postponing it: a search pays for the points outside one in proportion to their
        share of its scope, a build in proportion to the whole index (the child loads all of
        it, the service loads the result beside the old).
        """
        if self._writing.locked() or self._shard is None:
            return
        policy, now = self._optimizing, time.monotonic()
        pause = policy.quiet_seconds - (now - self._last_read)
        latest = policy.latest_seconds - (now - self._last_write)
        loop = asyncio.get_running_loop()
        if pause > 0 and latest > 0:  # still searched: wait for a pause, or the latest
            self._quiet = loop.call_later(min(pause, latest), self._quiet_spell_ended)
            return
        unindexed, points = await self._unindexed()
        if unindexed < policy.quiet_points or self._quiet is not None:
            return  # too few, or a write meanwhile started the spell over
        if pause > 0 and 2 * unindexed < points:  # searched, and mostly indexed: wait
            self._quiet = loop.call_later(pause, self._quiet_spell_ended)
            return
        self._build_in_background()

    async def _unindexed(self) -> tuple[int, int]:
        """Return about how many points are outside any dense HNSW, and how many there are.

        Every point's BM25 vector counts as indexed (an inverted index in every segment), so
        what ``indexed_vectors`` lacks of two per point is the dense vectors not in an HNSW
        (a point with no BM25 term counts as one of them).
        """
        info = self._looked_at(await self.info())
        return max(0, 2 * info.points - info.indexed_vectors), info.points

    def _looked_at(self, info: ShardInfo) -> ShardInfo:
        """Note how many points are in an HNSW (every point's BM25 vector is indexed)."""
        self._indexed = max(0, info.indexed_vectors - info.points)
        return info

    async def info(self) -> ShardInfo:
        """Return what the shard holds: points, vectors in an index, segments."""
        return await self._run(Info())

    async def delete(self, ids: Sequence[UUID]) -> None:
        """Delete the points with these ids; unknown ids are ignored."""
        if ids:
            await self._write(Delete(tuple(ids)), ids)

    async def delete_where(self, filter: ScopeFilter) -> None:
        """Delete every point inside the scope."""
        await self._write(DeleteWhere(scope_conditions(filter)))

    async def search_dense(
        self, vector: DenseVector, filter: ScopeFilter, limit: int = 10
    ) -> list[Hit]:
        """Return the points in scope nearest to the vector by cosine, best first."""
        packed = dense_bytes(vector, self._dimension)
        conditions = scope_conditions(filter)
        return await self._search(
            lambda asked, payloads: NearestDense(packed, conditions, asked, payloads), limit
        )

    async def search_sparse(self, text: str, filter: ScopeFilter, limit: int = 10) -> list[Hit]:
        """Return the points in scope that best match the text by BM25, best first."""
        sparse = query_vector(text)
        if not sparse:
            return []
        indices, values = tuple(sparse.indices), tuple(sparse.values)
        conditions = scope_conditions(filter)
        return await self._search(
            lambda asked, payloads: NearestSparse(indices, values, conditions, asked, payloads),
            limit,
        )

    async def count(self, filter: ScopeFilter) -> int:
        """Return how many points are inside the scope."""
        return await self._read(Count(scope_conditions(filter)))

    async def scroll(
        self, offset: UUID | None = None, limit: int = 1_000
    ) -> tuple[list[IndexPoint], UUID | None]:
        """Return up to ``limit`` stored points from ``offset`` on, and the next offset."""
        records, following = await self._read(Scroll(offset, limit))
        points = [point_from_stored(pid, dense, payload) for pid, dense, payload in records]
        return points, following

    async def optimize(self) -> None:
        """Merge segments and build the HNSW and sparse indexes here; return when built.

        A background optimisation under way ends first (its switch would bring back the
        segments it copied, not the ones optimised here).
        """
        building = self._building
        if building is not None and not building.done():
            await asyncio.shield(building)
        started = time.perf_counter()
        async with self._writing:
            changed = await self._run(Optimize())
        self._upserted_since_optimize = 0
        await self._optimized(changed, started)

    async def optimize_in_background(self) -> None:
        """Optimise a copy of the shard in a child process, then switch to it; return when done.

        Searches and writes go on meanwhile; the writes the copy missed are replayed on it
        before the switch. A failure is logged and leaves the shard as it was.
        """
        self._build_in_background()
        building = self._building
        if building is not None:
            await asyncio.shield(building)

    def _build_in_background(self) -> None:
        """Start a background optimisation unless one runs or the index is closed."""
        if self._shard is None or (self._building is not None and not self._building.done()):
            return
        self._building = asyncio.create_task(self._build())

    async def _build(self) -> None:
        started = time.perf_counter()
        target = self._generations.next()
        try:
            async with self._writing:
                since = self._upserted_since_optimize
                await _to_the_end(self._copy_to(target))
            built = await optimise_in_child(target, self._dimension, self._segment_points)
            if built.changed:
                await _to_the_end(self._switch_to(target))
            self._upserted_since_optimize = max(0, self._upserted_since_optimize - since)
            await self._optimized(built.changed, started, child_peak_rss_mb=built.peak_rss_mb)
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("edge_index.optimize_failed", folder=str(target))
        finally:
            async with self._writing:
                self._taken = None
            if self._folder != target:
                await asyncio.to_thread(shutil.rmtree, target, True)

    async def _copy_to(self, target: Path) -> None:
        """Flush the shard and copy its folder to ``target``; take the writes from now on
        (``_writing`` held)."""
        assert self._folder is not None
        await self._run(Flush())
        await asyncio.to_thread(self._generations.copy, self._folder, target)
        self._taken = []

    async def _switch_to(self, folder: Path) -> None:
        """Load the optimised copy, replay the writes it missed, and serve from it."""
        shards = self._opened_shards()
        async with self._writing:
            taken, self._taken = self._taken or [], None
            shard = await self._open(shards, folder)
            for operation in taken:
                await shards.run(shard, operation)
            await shards.run(shard, Flush())
            old, self._shard, self._folder = self._shard, shard, folder
            await asyncio.to_thread(self._generations.commit, folder)
        if old is not None:
            await shards.close(old)  # after any read sent to it: answers come in order
        await asyncio.to_thread(self._generations.clean)

    async def _optimized(
        self, changed: bool, started: float, child_peak_rss_mb: float | None = None
    ) -> None:
        """Log an optimisation: in this process, or in a child (and the child's peak RSS)."""
        info = self._looked_at(await self.info())
        where = "in_process" if child_peak_rss_mb is None else "child_process"
        _log.info(
            "edge_index.optimized",
            changed=changed,
            where=where,
            child_peak_rss_mb=child_peak_rss_mb,
            seconds=round(time.perf_counter() - started, 3),
            segments=info.segments,
            points=info.points,
            indexed_vectors=info.indexed_vectors,
        )

    async def close(self) -> None:
        """Flush pending writes and release the shard (and stop the index host);
        `ensure_collection()` reopens it.

        A background optimisation still running is stopped (its copy is removed).
        """
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        for task in (self._building, self._quiet_check):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._building = self._quiet_check = None
        shards, self._shards, self._shard = self._shards, None, None
        self._decoded.written(None)
        if shards is not None:
            await shards.stop()

    async def _open(self, shards: Shards, folder: Path) -> int:
        """Load the shard in ``folder`` if it holds one, else create it; return its number."""
        spec = ShardSpec(
            str(folder),
            self._dimension,
            self._segment_points,
            self._payloads_in_ram,
            search_threads(os.cpu_count()),
        )
        opened = await shards.open(spec)
        if opened.created:
            _log.info("edge_index.created", path=str(folder), dimension=self._dimension)
        else:
            _log.info("edge_index.loaded", path=str(folder), points=opened.points)
        return opened.handle

    def _opened_shards(self) -> Shards:
        """Return where the open shard runs, or fail with a hint if it is not open."""
        if self._shards is None or self._shard is None:
            raise RuntimeError("the Edge index is not open: call ensure_collection() first")
        return self._shards

    async def _run(self, operation: Operation[_Result]) -> _Result:
        """Apply an operation to the open shard; if the index host died, start another, reopen
        the shard in it, and apply it there (every operation can be applied twice)."""
        shards = self._opened_shards()
        assert self._shard is not None
        try:
            return await shards.run(self._shard, operation)
        except HostExited as error:
            await self._rehost(shards, error)
        assert self._shards is not None and self._shard is not None
        return await self._shards.run(self._shard, operation)

    async def _rehost(self, dead: Shards, error: HostExited) -> None:
        """Replace a dead index host by a new one holding the current generation (once, however
        many callers saw it die)."""
        async with self._opening:
            if self._shards is not dead:
                self._opened_shards()  # closed meanwhile: say so
                return
            _log.error("edge_index.host_exited", error=str(error), folder=str(self._folder))
            await dead.stop()
            shards = await self._started_shards()
            assert self._folder is not None
            try:
                self._shard = await self._open(shards, self._folder)
            except BaseException:
                await shards.stop()
                raise
            self._shards = shards

    async def _read(self, operation: Operation[_Result]) -> _Result:
        """Apply a read (it counts against the quiet spell)."""
        self._last_read = time.monotonic()
        return await self._run(operation)

    async def _write(
        self, operation: Operation[_Result], ids: Sequence[UUID] | None = None
    ) -> _Result:
        """Apply a write, one at a time; a background optimisation's copy gets it at its switch.

        ``ids`` are the points it touches (None: any point), forgotten by the decode cache.
        """
        self._decoded.written(ids)
        try:
            async with self._writing:
                answer = await self._run(operation)
                if self._taken is not None:
                    self._taken.append(operation)
        finally:
            self._decoded.written(ids)
        return answer

    async def _search(
        self, query: Callable[[int, bool], Operation[Scored]], limit: int
    ) -> list[Hit]:
        """Run one query (for ``n`` points, payloads or not: ``query(n, payloads)``) and return
        its hits.

        Payloads are decoded once and held until a write touches them (``DecodedPoints``).
        The query asks for the payloads too while the searches before it found some not held
        (a user's first questions): a second round trip to the index host costs a lone caller
        ~0.7 ms here, waking a process that sleeps; with them held it asks for ids and scores
        only, and reads any still missing by id. Equal scores come by point id, and a cut
        never falls inside them (``past_the_cut``, ``best_first``).
        """
        started = self._decoded.epoch
        payloads = self._cold

        def search(asked: int) -> Awaitable[Scored]:
            return self._read(query(asked, payloads))

        scored = await past_the_cut(search, lambda point: point[1], limit)
        kept = best_first(scored, limit)
        unheld = set(self._decoded.missing(pid for pid, _, _ in kept))
        self._cold = bool(unheld)
        stored = await self._payloads(
            [pid for pid, _, payload in kept if payload is None and pid in unheld]
        )
        found = (
            (pid, score, stored.get(pid) if payload is None else payload)
            for pid, score, payload in kept
        )
        return self._decoded.hits(found, started)

    async def _payloads(self, ids: Sequence[Any]) -> dict[UUID, dict[str, Any]]:
        """Return the stored payloads of these points by id (a deleted point has none)."""
        if not ids:
            return {}
        found = await self._read(Retrieve(tuple(ids)))
        return dict(found)


async def _to_the_end(work: Awaitable[_Result]) -> _Result:
    """Await ``work``; cancelled meanwhile, let it finish first (a copy or a switch is not
    left half done), then pass the cancellation on."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.gather(task, return_exceptions=True)
        raise
