"""Search index on Qdrant Edge: the Qdrant engine in-process, stored in a local folder."""

import asyncio
import math
import shutil
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import qdrant_edge as qe
import structlog

from memoryd.shared.adapters.index._mapping import (
    DIGEST_KEY,
    KEYWORD_FIELDS,
    TENANT_FIELD,
    TIME_FIELD,
    Condition,
    DecodedPoints,
    MatchAny,
    best_first,
    changed,
    dense_values,
    past_the_cut,
    point_from_stored,
    point_key,
    scope_conditions,
    stored_digests,
    stored_payload,
)
from memoryd.shared.adapters.index.edge_build import CONFIG_FILE, Generations, optimise_in_child
from memoryd.shared.adapters.index.layout import DENSE_VECTOR, SPARSE_VECTOR, edge_config
from memoryd.shared.adapters.index.port import DenseVector, Hit, IndexPoint, ScopeFilter
from memoryd.shared.adapters.index.sparse import (
    DEFAULT_AVG_LEN,
    SparseVector,
    document_vector,
    encoding,
    query_vector,
)

__all__ = ["EdgeSearchIndex"]

_log = structlog.get_logger(__name__)
_Request = TypeVar("_Request")
_Result = TypeVar("_Result")
# Filter-aware HNSW links only for the fields searches are narrowed by (tenant, user): links
# for kind, category and the like would multiply optimisation time for conditions that always
# arrive together with a tenant condition anyway.
_HNSW_FIELDS = frozenset({TENANT_FIELD, "user_id"})
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
    a child process on a copy, and also after ``quiet_seconds`` without a write or a search
    when at least ``quiet_points`` points are outside any HNSW; searches hold it off no later
    than ``latest_seconds`` after the last write while those are most of the points.
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


class EdgeSearchIndex:
    """Search index on an in-process Qdrant Edge shard in a local folder.

    Edge never optimises by itself: points are searchable as soon as they are upserted, but
    they sit in unindexed segments (searched by brute force: 1.4 ms a dense search at 12,620
    points in one scope, 0.4 ms with the HNSW) until an optimisation runs. `optimize()` runs one
    here and now (after a bulk load). With `Optimizing.every`, one runs after every that many
    upserted points; `Optimizing.in_background` (the service's way) runs those, and one after a
    quiet spell (`quiet_seconds` without a write or a read, `quiet_points` outside any HNSW;
    while most points are outside one, reads postpone it to `latest_seconds` after the last
    write at most), in a child process on a copy of the shard (`edge_build`), since Edge holds
    the GIL while it optimises (2.2 s at 12,620 points): the copy is loaded, the writes taken
    meanwhile replayed on it, and it replaces the shard. Writes run in a worker thread, one at
    a time; reads run on the event loop, since the engine holds the GIL while it reads (see
    `_read`).

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
        search_in_thread: bool = False,
        payloads_in_ram: bool = False,
    ) -> None:
        """Describe the index; nothing is opened until `ensure_collection()`."""
        if dimension <= 0:
            raise ValueError(f"dimension must be positive, got {dimension}")
        if segment_points is not None and segment_points <= 0:
            raise ValueError(f"segment_points must be positive, got {segment_points}")
        self._generations = Generations(Path(path))
        self._dimension = dimension
        self._avg_len = avg_len
        self._encoding = encoding(avg_len)
        self._optimizing = optimizing
        self._segment_points = segment_points
        self._search_in_thread = search_in_thread
        self._payloads_in_ram = payloads_in_ram
        self._upserted_since_optimize = 0
        self._shard: qe.EdgeShard | None = None
        self._folder: Path | None = None  # the generation the shard was loaded from
        # One write at a time; a background optimisation holds it while it copies and switches.
        self._writing = asyncio.Lock()
        # The writes applied since the copy a background optimisation works on, in order (read
        # and written only under ``_writing``).
        self._taken: list[qe.UpdateOperation] | None = None
        self._building: asyncio.Task[None] | None = None
        self._quiet: asyncio.TimerHandle | None = None
        self._last_read = -math.inf  # time.monotonic() of the last read begun
        self._last_write = -math.inf  # time.monotonic() of the last write ended
        self._thread_reads = 0
        self._no_thread_reads = asyncio.Event()
        self._no_thread_reads.set()
        self._decoded = DecodedPoints()
        # Two concurrent first calls would otherwise both create (or load) the same folder.
        self._opening = asyncio.Lock()

    async def ensure_collection(self) -> None:
        """Open the shard at the path, creating it and any missing payload index.

        Opening counts as a write for the quiet spell: points a run before left outside any
        HNSW are optimised after one, as if just written.
        """
        async with self._opening:
            if self._shard is None:
                self._generations.home.mkdir(parents=True, exist_ok=True)
                await asyncio.to_thread(self._generations.clean)
                self._folder = self._generations.current()
                self._shard = await asyncio.to_thread(self._open, self._folder)
                if self._optimizing.every is not None:
                    self._wait_for_quiet()

    async def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert the points, replacing any point with the same id."""
        await self._upsert(points, only_changed=False)

    async def upsert_changed(self, points: Sequence[IndexPoint]) -> int:
        """Write the points that differ from what is stored under their ids; return how many."""
        return await self._upsert(points, only_changed=True)

    async def _upsert(self, points: Sequence[IndexPoint], only_changed: bool) -> int:
        """Write the points (or those that changed) in a worker thread; return how many."""
        if not points:
            return 0
        # Encoding BM25 costs ~0.3 ms per chat turn: in a worker thread, with the write.
        ids = [point.id for point in points]
        self._decoded.written(ids)
        try:
            async with self._writing:
                written = await asyncio.to_thread(self._upsert_now, points, only_changed)
        finally:
            self._decoded.written(ids)
        self._upserted_since_optimize += written
        await self._after_write(written)
        return written

    async def _after_write(self, written: int) -> None:
        """Optimise if ``Optimizing.every`` points were written; else wait for a quiet spell."""
        policy = self._optimizing
        if policy.every is None or written == 0:
            return
        if self._upserted_since_optimize >= policy.every:
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
        self._quiet = loop.call_later(self._optimizing.quiet_seconds, self._build_when_worth_it)

    def _build_when_worth_it(self) -> None:
        """After a quiet spell: optimise if enough points are outside any HNSW.

        A write still under way is no quiet spell (it was armed when the write before it
        ended): that write arms the timer again when it ends. A read in the spell moves its
        end to ``quiet_seconds`` after that read, but no later than ``latest_seconds`` after
        the last write while most points are outside any HNSW; when most are in one, reads
        keep postponing it: a search pays for the points outside one in proportion to their
        share of its scope, a build in proportion to the whole index (the child loads all of
        it, the service loads the result beside the old).
        """
        self._quiet = None
        if self._writing.locked() or self._shard is None:
            return
        policy, now = self._optimizing, time.monotonic()
        pause = policy.quiet_seconds - (now - self._last_read)
        latest = policy.latest_seconds - (now - self._last_write)
        loop = asyncio.get_running_loop()
        if pause > 0 and latest > 0:  # still searched: wait for a pause, or the latest
            self._quiet = loop.call_later(min(pause, latest), self._build_when_worth_it)
            return
        unindexed, points = self._unindexed()
        if unindexed < policy.quiet_points:
            return
        if pause > 0 and 2 * unindexed < points:  # searched, and mostly indexed: wait
            self._quiet = loop.call_later(pause, self._build_when_worth_it)
            return
        self._build_in_background()

    def _unindexed(self) -> tuple[int, int]:
        """Return about how many points are outside any dense HNSW, and how many there are.

        Every point's BM25 vector counts as indexed (an inverted index in every segment), so
        what ``indexed_vectors`` lacks of two per point is the dense vectors not in an HNSW
        (a point with no BM25 term counts as one of them).
        """
        info = self._opened().info()
        return max(0, 2 * info.points_count - info.indexed_vectors_count), info.points_count

    async def delete(self, ids: Sequence[UUID]) -> None:
        """Delete the points with these ids; unknown ids are ignored."""
        if ids:
            await self._write(qe.UpdateOperation.delete_points(list(ids)), ids)

    async def delete_where(self, filter: ScopeFilter) -> None:
        """Delete every point inside the scope."""
        await self._write(qe.UpdateOperation.delete_points_by_filter(_edge_filter(filter)))

    async def search_dense(
        self, vector: DenseVector, filter: ScopeFilter, limit: int = 10
    ) -> list[Hit]:
        """Return the points in scope nearest to the vector by cosine, best first."""
        query = qe.Query.Nearest(dense_values(vector, self._dimension), using=DENSE_VECTOR)
        return await self._search(query, filter, limit)

    async def search_sparse(self, text: str, filter: ScopeFilter, limit: int = 10) -> list[Hit]:
        """Return the points in scope that best match the text by BM25, best first."""
        sparse = query_vector(text)
        if not sparse:
            return []
        query = qe.Query.Nearest(_edge_sparse(sparse), using=SPARSE_VECTOR)
        return await self._search(query, filter, limit)

    async def count(self, filter: ScopeFilter) -> int:
        """Return how many points are inside the scope."""
        request = qe.CountRequest(exact=True, filter=_edge_filter(filter))
        return await self._read(self._opened().count, request)

    async def scroll(
        self, offset: UUID | None = None, limit: int = 1_000
    ) -> tuple[list[IndexPoint], UUID | None]:
        """Return up to ``limit`` stored points from ``offset`` on, and the next offset."""
        request = qe.ScrollRequest(
            offset=offset, limit=limit, with_payload=True, with_vector=[DENSE_VECTOR]
        )
        records, following = await self._read(self._opened().scroll, request)
        points = [
            point_from_stored(record.id, _dense_of(record.vector), record.payload or {})
            for record in records
        ]
        return points, None if following is None else UUID(str(following))

    async def optimize(self) -> None:
        """Merge segments and build the HNSW and sparse indexes here; return when built.

        A background optimisation under way ends first (its switch would bring back the
        segments it copied, not the ones optimised here).
        """
        building = self._building
        if building is not None and not building.done():
            await asyncio.shield(building)
        shard = self._opened()
        started = time.perf_counter()
        async with self._writing:
            changed = await asyncio.to_thread(shard.optimize)
        self._upserted_since_optimize = 0
        self._optimized(shard, changed, started)

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
                await _to_the_end(asyncio.to_thread(self._copy_to, target))
            built = await optimise_in_child(target, self._dimension, self._segment_points)
            if built.changed:
                await _to_the_end(self._switch_to(target))
            self._upserted_since_optimize = max(0, self._upserted_since_optimize - since)
            self._optimized(
                self._opened(), built.changed, started, child_peak_rss_mb=built.peak_rss_mb
            )
        except asyncio.CancelledError:
            raise
        except Exception:
            _log.exception("edge_index.optimize_failed", folder=str(target))
        finally:
            async with self._writing:
                self._taken = None
            if self._folder != target:
                await asyncio.to_thread(shutil.rmtree, target, True)

    def _copy_to(self, target: Path) -> None:
        """Flush the shard and copy its folder to ``target``; take the writes from now on."""
        assert self._folder is not None
        self._opened().flush()
        self._generations.copy(self._folder, target)
        self._taken = []

    async def _switch_to(self, folder: Path) -> None:
        """Load the optimised copy, replay the writes it missed, and serve from it."""
        async with self._writing:
            taken, self._taken = self._taken or [], None
            shard = await asyncio.to_thread(self._caught_up, folder, taken)
            old, self._shard, self._folder = self._shard, shard, folder
            await asyncio.to_thread(self._generations.commit, folder)
        await self._no_thread_reads.wait()  # a search in a worker thread may hold the old one
        if old is not None:
            await asyncio.to_thread(_flush_and_close, old)
        await asyncio.to_thread(self._generations.clean)

    def _caught_up(self, folder: Path, taken: Sequence[qe.UpdateOperation]) -> qe.EdgeShard:
        """Load the shard in ``folder`` and apply ``taken`` to it (blocking)."""
        shard = self._open(folder)
        for operation in taken:
            shard.update(operation)
        shard.flush()
        return shard

    def _optimized(
        self,
        shard: qe.EdgeShard,
        changed: bool,
        started: float,
        child_peak_rss_mb: float | None = None,
    ) -> None:
        """Log an optimisation: in this process, or in a child (and the child's peak RSS)."""
        info = shard.info()
        where = "in_process" if child_peak_rss_mb is None else "child_process"
        _log.info(
            "edge_index.optimized",
            changed=changed,
            where=where,
            child_peak_rss_mb=child_peak_rss_mb,
            seconds=round(time.perf_counter() - started, 3),
            segments=info.segments_count,
            points=info.points_count,
            indexed_vectors=info.indexed_vectors_count,
        )

    async def close(self) -> None:
        """Flush pending writes and release the shard; `ensure_collection()` reopens it.

        A background optimisation still running is stopped (its copy is removed).
        """
        if self._quiet is not None:
            self._quiet.cancel()
            self._quiet = None
        building, self._building = self._building, None
        if building is not None and not building.done():
            building.cancel()
            await asyncio.gather(building, return_exceptions=True)
        shard, self._shard = self._shard, None
        self._decoded.written(None)
        if shard is not None:
            await self._no_thread_reads.wait()
            await asyncio.to_thread(_flush_and_close, shard)

    def _open(self, folder: Path) -> qe.EdgeShard:
        """Load the shard if the folder holds one, else create it; then add missing indexes."""
        config = edge_config(
            self._dimension, self._segment_points, payloads_in_ram=self._payloads_in_ram
        )
        if (folder / CONFIG_FILE).exists():
            # Passing the config makes Edge refuse a shard built with another dimension, and
            # applies the segment bound to a shard created without one.
            shard = qe.EdgeShard.load(str(folder), config)
            _log.info("edge_index.loaded", path=str(folder), points=shard.info().points_count)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            shard = qe.EdgeShard.create(str(folder), config)
            _log.info("edge_index.created", path=str(folder), dimension=self._dimension)
        existing = shard.info().payload_schema
        for field, schema in _payload_indexes().items():
            if field not in existing:
                shard.update(qe.UpdateOperation.create_field_index(field, schema))
        return shard

    def _opened(self) -> qe.EdgeShard:
        """Return the open shard, or fail with a hint if it is not open."""
        if self._shard is None:
            raise RuntimeError("the Edge index is not open: call ensure_collection() first")
        return self._shard

    async def _write(
        self, operation: qe.UpdateOperation, ids: Sequence[UUID] | None = None
    ) -> None:
        """Apply a write in a worker thread, so a large batch does not stall the event loop.

        ``ids`` are the points it touches (None: any point), forgotten by the decode cache.
        """
        self._decoded.written(ids)
        try:
            async with self._writing:
                await asyncio.to_thread(self._update, operation)
        finally:
            self._decoded.written(ids)

    def _update(self, operation: qe.UpdateOperation) -> None:
        """Apply a write (blocking, ``_writing`` held); a background optimisation's copy gets it
        at its switch."""
        self._opened().update(operation)
        if self._taken is not None:
            self._taken.append(operation)

    async def _search(self, query: qe.Query, scope: ScopeFilter, limit: int) -> list[Hit]:
        """Run one query in scope and return its hits.

        The query asks for ids and scores only, and the payloads not decoded already are read
        by id: a query of 40 with payloads took 4.4-4.6 ms here, without them 1.0 ms, and
        reading 40 payloads by id 0.44 ms (10,000 points in one scope). Equal scores come
        by point id, and a cut never falls inside them (``past_the_cut``, ``best_first``).
        """
        started = self._decoded.epoch

        def search(asked: int) -> Awaitable[list[qe.ScoredPoint]]:
            request = qe.QueryRequest(
                limit=asked, query=query, filter=_edge_filter(scope), with_payload=False
            )
            return self._read(self._opened().query, request)

        scored = await past_the_cut(search, lambda point: point.score, limit)
        kept = best_first(((point.id, point.score, None) for point in scored), limit)
        payloads = await self._payloads(self._decoded.missing(point[0] for point in kept))
        found = ((pid, score, payloads.get(point_key(pid))) for pid, score, _ in kept)
        return self._decoded.hits(found, started)

    async def _payloads(self, ids: Sequence[Any]) -> dict[UUID, dict[str, Any]]:
        """Return the stored payloads of these points by id (a deleted point has none)."""
        if not ids:
            return {}
        records = await self._read(self._retrieve, list(ids))
        return {point_key(record.id): record.payload or {} for record in records}

    def _retrieve(self, ids: list[Any]) -> list[qe.Record]:
        """Read the points' payloads, without their vectors (blocking)."""
        return self._opened().retrieve(ids, True, False)

    async def _read(self, call: Callable[[_Request], _Result], request: _Request) -> _Result:
        """Run a read on the event loop, or in a worker thread if `search_in_thread` is on.

        On the loop by default: the engine holds the GIL while it reads, so a thread only
        adds two hand-offs. Measured on 12,620 points in one scope (2 cores): two threads
        querying at once took 1.02 ms a dense search, as one thread alone did; a Python loop
        beside a searching thread ran at 0.57 of its own speed. In recall at 5,000 turns
        (300 questions, one caller, three alternating pairs) the BM25 search took 1.3-1.6 ms
        on the loop against 4.1-4.6 ms in a thread, the dense one 2.1 against 2.5, the
        client's p50 14.6-15.9 against 15.9-16.4 ms. Session 10's comparison
        (tests/component/bench_index_edge.py, 100,000 points, 8 callers) had put the two
        within noise.
        """
        self._last_read = time.monotonic()
        if not self._search_in_thread:
            return call(request)
        self._thread_reads += 1
        self._no_thread_reads.clear()
        try:
            return await asyncio.to_thread(call, request)
        finally:
            self._thread_reads -= 1
            if self._thread_reads == 0:
                self._no_thread_reads.set()

    def _upsert_now(self, points: Sequence[IndexPoint], only_changed: bool) -> int:
        """Write the points (or those that changed), blocking the thread.

        Only the points written are encoded for BM25: a replay finds most unchanged by digest.
        """
        payloads = [stored_payload(point, self._encoding) for point in points]
        positions: Sequence[int] = range(len(points))
        if only_changed:
            ids = [point.id for point in points]
            positions = changed(payloads, self._stored_digests(ids), ids)
        if positions:
            edge_points = [self._edge_point(points[i], payloads[i]) for i in positions]
            self._update(qe.UpdateOperation.upsert_points(edge_points))
        return len(positions)

    def _stored_digests(self, ids: list[UUID]) -> dict[UUID, str | None]:
        """Return the digest stored with each of these points that exists (blocking)."""
        return stored_digests(self._opened().retrieve(list(ids), [DIGEST_KEY], False))

    def _edge_point(self, point: IndexPoint, payload: dict[str, Any]) -> qe.Point:
        """Return the Edge point: named dense and BM25 vectors, payload with the text."""
        vectors: dict[str, qe.NamedVector] = {
            DENSE_VECTOR: dense_values(point.dense, self._dimension)
        }
        sparse = document_vector(point.text, self._avg_len)
        if sparse:
            vectors[SPARSE_VECTOR] = _edge_sparse(sparse)
        return qe.Point(point.id, vectors, payload)


async def _to_the_end(work: Awaitable[_Result]) -> _Result:
    """Await ``work``; cancelled meanwhile, let it finish first (a copy or a switch is not
    left half done), then pass the cancellation on."""
    task = asyncio.ensure_future(work)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.gather(task, return_exceptions=True)
        raise


def _payload_indexes() -> dict[str, qe.KeywordIndexParams | qe.FloatIndexParams]:
    """Return the payload index of every filterable field."""
    indexes: dict[str, qe.KeywordIndexParams | qe.FloatIndexParams] = {
        field: qe.KeywordIndexParams(
            is_tenant=field == TENANT_FIELD, enable_hnsw=field in _HNSW_FIELDS
        )
        for field in KEYWORD_FIELDS
    }
    indexes[TIME_FIELD] = qe.FloatIndexParams(enable_hnsw=False)
    return indexes


def _edge_filter(scope: ScopeFilter) -> qe.Filter:
    """Return the Edge filter a point must pass to be in scope."""
    return qe.Filter(must=[_edge_condition(condition) for condition in scope_conditions(scope)])


def _edge_condition(condition: Condition) -> qe.FieldCondition:
    """Return one Edge field condition."""
    if isinstance(condition, MatchAny):
        values = condition.values
        match = qe.MatchValue(values[0]) if len(values) == 1 else qe.MatchAny(list(values))
        return qe.FieldCondition(condition.key, match=match)
    return qe.FieldCondition(condition.key, range=qe.RangeFloat(gte=condition.gte, lt=condition.lt))


def _edge_sparse(sparse: SparseVector) -> qe.SparseVector:
    """Return the Edge form of a sparse vector."""
    return qe.SparseVector(list(sparse.indices), list(sparse.values))


def _dense_of(vectors: object) -> list[float]:
    """Return the dense vector of a scrolled record."""
    named = vectors if isinstance(vectors, dict) else {}
    return list(named.get(DENSE_VECTOR, []))


def _flush_and_close(shard: qe.EdgeShard) -> None:
    """Flush the shard's pending writes to disk, then close it."""
    shard.flush()
    shard.close()
