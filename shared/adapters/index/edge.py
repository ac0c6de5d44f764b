"""Search index on Qdrant Edge: the Qdrant engine in-process, stored in a local folder."""

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import qdrant_edge as qe
import structlog

from memoryd.shared.adapters.index._mapping import (
    DENSE_VECTOR,
    DIGEST_KEY,
    KEYWORD_FIELDS,
    SPARSE_VECTOR,
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
# Written by EdgeShard.create; its presence means the folder already holds a shard.
_CONFIG_FILE = "edge_config.json"
# Filter-aware HNSW links only for the fields searches are narrowed by (tenant, user): links
# for kind, category and the like would multiply optimisation time for conditions that always
# arrive together with a tenant condition anyway.
_HNSW_FIELDS = frozenset({TENANT_FIELD, "user_id"})


class EdgeSearchIndex:
    """Search index on an in-process Qdrant Edge shard in a local folder.

    Edge never optimises in the background: points are searchable as soon as they are upserted,
    but they sit in unindexed segments (searched by brute force) until `optimize()` runs.
    Call it after a bulk load, or pass `auto_optimize_every` to run it after every that many
    upserted points. Writes and optimisation run in a worker thread (they can take seconds);
    reads run on the event loop, since the engine holds the GIL while it reads (see `_read`).

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
        auto_optimize_every: int | None = None,
        segment_points: int | None = None,
        search_in_thread: bool = False,
    ) -> None:
        """Describe the index; nothing is opened until `ensure_collection()`."""
        if dimension <= 0:
            raise ValueError(f"dimension must be positive, got {dimension}")
        if auto_optimize_every is not None and auto_optimize_every <= 0:
            raise ValueError(f"auto_optimize_every must be positive, got {auto_optimize_every}")
        if segment_points is not None and segment_points <= 0:
            raise ValueError(f"segment_points must be positive, got {segment_points}")
        self._path = Path(path)
        self._dimension = dimension
        self._avg_len = avg_len
        self._encoding = encoding(avg_len)
        self._auto_optimize_every = auto_optimize_every
        self._segment_points = segment_points
        self._search_in_thread = search_in_thread
        self._upserted_since_optimize = 0
        self._shard: qe.EdgeShard | None = None
        self._decoded = DecodedPoints()
        # Two concurrent first calls would otherwise both create (or load) the same folder.
        self._opening = asyncio.Lock()

    async def ensure_collection(self) -> None:
        """Open the shard at the path, creating it and any missing payload index."""
        async with self._opening:
            if self._shard is None:
                self._shard = await asyncio.to_thread(self._open)

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
            written = await asyncio.to_thread(self._upsert_now, points, only_changed)
        finally:
            self._decoded.written(ids)
        self._upserted_since_optimize += written
        every = self._auto_optimize_every
        if every is not None and self._upserted_since_optimize >= every:
            await self.optimize()
        return written

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
        """Merge segments and build the HNSW and sparse indexes; return when they are built."""
        shard = self._opened()
        started = time.perf_counter()
        changed = await asyncio.to_thread(shard.optimize)
        self._upserted_since_optimize = 0
        info = shard.info()
        _log.info(
            "edge_index.optimized",
            changed=changed,
            seconds=round(time.perf_counter() - started, 3),
            segments=info.segments_count,
            points=info.points_count,
            indexed_vectors=info.indexed_vectors_count,
        )

    async def close(self) -> None:
        """Flush pending writes and release the shard; `ensure_collection()` reopens it."""
        shard, self._shard = self._shard, None
        self._decoded.written(None)
        if shard is not None:
            await asyncio.to_thread(_flush_and_close, shard)

    def _open(self) -> qe.EdgeShard:
        """Load the shard if the folder holds one, else create it; then add missing indexes."""
        config = _edge_config(self._dimension, self._segment_points)
        if (self._path / _CONFIG_FILE).exists():
            # Passing the config makes Edge refuse a shard built with another dimension, and
            # applies the segment bound to a shard created without one.
            shard = qe.EdgeShard.load(str(self._path), config)
            _log.info("edge_index.loaded", path=str(self._path), points=shard.info().points_count)
        else:
            shard = qe.EdgeShard.create(str(self._path), config)
            _log.info("edge_index.created", path=str(self._path), dimension=self._dimension)
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
            await asyncio.to_thread(self._opened().update, operation)
        finally:
            self._decoded.written(ids)

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
        if self._search_in_thread:
            return await asyncio.to_thread(call, request)
        return call(request)

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
            self._opened().update(qe.UpdateOperation.upsert_points(edge_points))
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


def segment_kilobytes(points: int, dimension: int) -> int:
    """Return the segment size Edge's optimiser is given for ``points`` dense float32 vectors.

    Qdrant sizes segments in kilobytes of vector data: 20,000 points of 384 floats are 30,000.
    """
    return max(1, points * dimension * 4 // 1024)


def _edge_config(dimension: int, segment_points: int | None = None) -> qe.EdgeConfig:
    """Return the shard layout: a cosine dense vector and a BM25 sparse vector with IDF.

    With ``segment_points``, segments stop growing at about that many points.
    """
    optimizers = None
    if segment_points is not None:
        optimizers = qe.EdgeOptimizersConfig(
            max_segment_size=segment_kilobytes(segment_points, dimension)
        )
    return qe.EdgeConfig(
        vectors={DENSE_VECTOR: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE_VECTOR: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=qe.HnswIndexConfig(m=16, ef_construct=100, full_scan_threshold=10_000),
        optimizers=optimizers,
    )


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
