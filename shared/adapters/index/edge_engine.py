"""What a Qdrant Edge shard is asked, as plain data, and the engine that answers it.

Each operation is a small frozen value (it pickles: the index host, ``edge_host``, receives
them over a socket) whose ``apply`` turns it into Edge's calls on one shard and returns plain
values (ids, scores, payload dicts). The engine holds the open shards by number. Storing a
point happens here too: its digest and its BM25 vector are computed where the shard is, so
a host takes that work off the serving process.

This module imports Qdrant Edge, the BM25 encoding and the standard library only: the index
host runs it alone.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar
from uuid import UUID

import qdrant_edge as qe

from memoryd.shared.adapters.index.edge_build import CONFIG_FILE
from memoryd.shared.adapters.index.layout import DENSE_VECTOR, SPARSE_VECTOR, edge_config
from memoryd.shared.adapters.index.sparse import document_vector, encoding
from memoryd.shared.adapters.index.stored import (
    DIGEST_KEY,
    KEYWORD_FIELDS,
    TENANT_FIELD,
    TEXT_KEY,
    TIME_FIELD,
    Condition,
    MatchAny,
    content_digest,
    point_key,
)
from memoryd.shared.adapters.pages import release_shared, trim_heap

__all__ = [
    "Count",
    "Delete",
    "DeleteWhere",
    "Engine",
    "Flush",
    "Info",
    "NearestDense",
    "NearestSparse",
    "Opened",
    "Operation",
    "Optimize",
    "Retrieve",
    "Scored",
    "Scroll",
    "ShardInfo",
    "ShardSpec",
    "Store",
    "StoredPoint",
]

R = TypeVar("R")
# A search's answer: each point's id, score, and payload (None: not asked for).
Scored = list[tuple[UUID, float, dict[str, Any] | None]]

# Filter-aware HNSW links only for the fields searches are narrowed by (tenant, user): links
# for kind, category and the like would multiply optimisation time for conditions that always
# arrive together with a tenant condition anyway.
_HNSW_FIELDS = frozenset({TENANT_FIELD, "user_id"})


def _floats(packed: bytes) -> list[float]:
    vector = array("f")
    vector.frombytes(packed)
    return vector.tolist()


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """Where a shard lives and its layout (see ``layout.edge_config``)."""

    folder: str
    dimension: int
    segment_points: int | None = None
    payloads_in_ram: bool | None = None
    search_threads: int | None = None


@dataclass(frozen=True, slots=True)
class Opened:
    """A shard the engine opened: its number, how many points it holds, whether it is new."""

    handle: int
    points: int
    created: bool


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """What a shard holds: points, dense and BM25 vectors in an index, segments."""

    points: int
    indexed_vectors: int
    segments: int


@dataclass(frozen=True, slots=True)
class StoredPoint:
    """A point as it is stored: id, float32 dense bytes, text and payload (digest to come)."""

    id: UUID
    dense: bytes
    text: str
    payload: dict[str, Any]


class Operation(Generic[R]):
    """One thing asked of a shard; ``writes`` says whether it changes what the shard holds."""

    __slots__ = ()
    writes: ClassVar[bool] = False
    # Blocks for a while (a write, an optimisation): inline, it runs in a worker thread.
    long: ClassVar[bool] = False

    def apply(self, shard: qe.EdgeShard) -> R:
        """Do it on ``shard`` and return the answer as plain values."""
        raise NotImplementedError


def _filter(conditions: Sequence[Condition]) -> qe.Filter:
    return qe.Filter(must=[_condition(condition) for condition in conditions])


def _condition(condition: Condition) -> qe.FieldCondition:
    if isinstance(condition, MatchAny):
        values = condition.values
        match = qe.MatchValue(values[0]) if len(values) == 1 else qe.MatchAny(list(values))
        return qe.FieldCondition(condition.key, match=match)
    return qe.FieldCondition(condition.key, range=qe.RangeFloat(gte=condition.gte, lt=condition.lt))


def _scored(
    shard: qe.EdgeShard,
    query: qe.Query,
    conditions: Sequence[Condition],
    limit: int,
    payloads: bool,
) -> Scored:
    """Run the query for ids and scores, and read the payloads by id if asked.

    The payloads are read apart: a query of 40 with payloads took 4.4-4.6 ms here, without
    them 1.0 ms, and reading 40 payloads by id 0.44 ms (10,000 points in one scope).
    """
    request = qe.QueryRequest(
        limit=limit, query=query, filter=_filter(conditions), with_payload=False
    )
    scored = [(point_key(point.id), point.score) for point in shard.query(request)]
    stored: dict[UUID, dict[str, Any]] = {}
    if payloads and scored:
        ids = list[int | UUID | str](point_id for point_id, _ in scored)
        stored = {point_key(r.id): r.payload or {} for r in shard.retrieve(ids, True, False)}
    return [(point_id, score, stored.get(point_id)) for point_id, score in scored]


def _sparse(indices: Sequence[int], values: Sequence[float]) -> qe.SparseVector:
    return qe.SparseVector(list(indices), list(values))


@dataclass(frozen=True, slots=True)
class NearestDense(Operation[Scored]):
    """The ``limit`` points in scope nearest to a float32 vector by cosine: (id, score), and
    their payloads with ``payloads``."""

    vector: bytes
    conditions: tuple[Condition, ...]
    limit: int
    payloads: bool = False

    def apply(self, shard: qe.EdgeShard) -> Scored:
        """Search the dense vectors."""
        query = qe.Query.Nearest(_floats(self.vector), using=DENSE_VECTOR)
        return _scored(shard, query, self.conditions, self.limit, self.payloads)


@dataclass(frozen=True, slots=True)
class NearestSparse(Operation[Scored]):
    """The ``limit`` points in scope that best match a BM25 query vector: (id, score), and
    their payloads with ``payloads``."""

    indices: tuple[int, ...]
    values: tuple[float, ...]
    conditions: tuple[Condition, ...]
    limit: int
    payloads: bool = False

    def apply(self, shard: qe.EdgeShard) -> Scored:
        """Search the BM25 vectors."""
        query = qe.Query.Nearest(_sparse(self.indices, self.values), using=SPARSE_VECTOR)
        return _scored(shard, query, self.conditions, self.limit, self.payloads)


@dataclass(frozen=True, slots=True)
class Retrieve(Operation[list[tuple[UUID, dict[str, Any]]]]):
    """The payloads of these points that exist (only ``keys`` of them, if given)."""

    ids: tuple[UUID, ...]
    keys: tuple[str, ...] | None = None

    def apply(self, shard: qe.EdgeShard) -> list[tuple[UUID, dict[str, Any]]]:
        """Read the payloads, without the vectors."""
        selector: bool | list[str] = True if self.keys is None else list(self.keys)
        records = shard.retrieve(list[int | UUID | str](self.ids), selector, False)
        return [(point_key(record.id), record.payload or {}) for record in records]


@dataclass(frozen=True, slots=True)
class Count(Operation[int]):
    """How many points are in scope."""

    conditions: tuple[Condition, ...]

    def apply(self, shard: qe.EdgeShard) -> int:
        """Count exactly."""
        return int(shard.count(qe.CountRequest(exact=True, filter=_filter(self.conditions))))


ScrolledPoint = tuple[UUID, list[float], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Scroll(Operation[tuple[list[ScrolledPoint], UUID | None]]):
    """Up to ``limit`` stored points from ``offset`` on, with dense vector and payload."""

    offset: UUID | None
    limit: int

    def apply(self, shard: qe.EdgeShard) -> tuple[list[ScrolledPoint], UUID | None]:
        """Page through the points, and say where the next page starts (None: the end)."""
        request = qe.ScrollRequest(
            offset=self.offset, limit=self.limit, with_payload=True, with_vector=[DENSE_VECTOR]
        )
        records, following = shard.scroll(request)
        points = [
            (point_key(record.id), _dense_of(record.vector), record.payload or {})
            for record in records
        ]
        return points, None if following is None else point_key(following)


def _dense_of(vectors: object) -> list[float]:
    named = vectors if isinstance(vectors, dict) else {}
    return list(named.get(DENSE_VECTOR, []))


@dataclass(frozen=True, slots=True)
class Info(Operation[ShardInfo]):
    """What the shard holds."""

    def apply(self, shard: qe.EdgeShard) -> ShardInfo:
        """Read the shard's counts."""
        info = shard.info()
        return ShardInfo(info.points_count, info.indexed_vectors_count, info.segments_count)


@dataclass(frozen=True, slots=True)
class Store(Operation[int]):
    """Write the points (with ``only_changed``, those whose digest differs from the stored).

    Each is stored with its text, its digest and its BM25 vector (encoded for ``avg_len``):
    only the points written are encoded, since a replay finds most unchanged by digest.
    Return how many were written.
    """

    writes: ClassVar[bool] = True
    long: ClassVar[bool] = True

    points: tuple[StoredPoint, ...]
    avg_len: float
    only_changed: bool = False

    def apply(self, shard: qe.EdgeShard) -> int:
        """Digest, compare, encode and upsert."""
        bm25 = encoding(self.avg_len)
        payloads = [self._payload(point, bm25) for point in self.points]
        positions: Sequence[int] = range(len(self.points))
        if self.only_changed:
            ids = [point.id for point in self.points]
            records = shard.retrieve(list[int | UUID | str](ids), [DIGEST_KEY], False)
            stored = {point_key(r.id): (r.payload or {}).get(DIGEST_KEY) for r in records}
            positions = [
                at
                for at, point_id in enumerate(ids)
                if stored.get(point_id) != payloads[at][DIGEST_KEY]
            ]
        if positions:
            edge = [self._edge_point(self.points[at], payloads[at]) for at in positions]
            shard.update(qe.UpdateOperation.upsert_points(edge))
        return len(positions)

    @staticmethod
    def _payload(point: StoredPoint, bm25: str) -> dict[str, Any]:
        payload = {**point.payload, TEXT_KEY: point.text}
        payload[DIGEST_KEY] = content_digest(payload, point.dense, bm25)
        return payload

    def _edge_point(self, point: StoredPoint, payload: dict[str, Any]) -> qe.Point:
        vectors: dict[str, qe.NamedVector] = {DENSE_VECTOR: _floats(point.dense)}
        sparse = document_vector(point.text, self.avg_len)
        if sparse:
            vectors[SPARSE_VECTOR] = _sparse(sparse.indices, sparse.values)
        return qe.Point(point.id, vectors, payload)


@dataclass(frozen=True, slots=True)
class Delete(Operation[None]):
    """Delete the points with these ids (unknown ids are passed over)."""

    writes: ClassVar[bool] = True
    long: ClassVar[bool] = True

    ids: tuple[UUID, ...]

    def apply(self, shard: qe.EdgeShard) -> None:
        """Delete by id."""
        shard.update(qe.UpdateOperation.delete_points(list(self.ids)))


@dataclass(frozen=True, slots=True)
class DeleteWhere(Operation[None]):
    """Delete every point in scope."""

    writes: ClassVar[bool] = True
    long: ClassVar[bool] = True

    conditions: tuple[Condition, ...]

    def apply(self, shard: qe.EdgeShard) -> None:
        """Delete by filter."""
        shard.update(qe.UpdateOperation.delete_points_by_filter(_filter(self.conditions)))


@dataclass(frozen=True, slots=True)
class Optimize(Operation[bool]):
    """Merge segments and build the indexes here; say whether anything changed."""

    long: ClassVar[bool] = True

    def apply(self, shard: qe.EdgeShard) -> bool:
        """Run Edge's optimiser."""
        return bool(shard.optimize())


@dataclass(frozen=True, slots=True)
class Flush(Operation[None]):
    """Write what the shard holds in memory to its folder."""

    long: ClassVar[bool] = True

    def apply(self, shard: qe.EdgeShard) -> None:
        """Flush."""
        shard.flush()


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


# Edge's write-ahead log folder in a shard's, and how often the pages written to it are let go
# of (``Engine._release_logs``: reading the index host's mappings takes ~1 ms).
WAL_FOLDER = "wal"
LOG_RELEASE_SECONDS = 10.0
# How long opening waits for a shard another process holds: the index host of a process just
# killed flushes and releases its shards before it exits, and a new one may already be asking.
HELD_SECONDS = 30.0


def _load(folder: Path, config: qe.EdgeConfig, deadline: float) -> qe.EdgeShard:
    """Load the shard in ``folder``, waiting while another process holds its write-ahead log."""
    while True:
        try:
            return qe.EdgeShard.load(str(folder), config)
        except Exception as error:
            # Edge says only this of a log locked by another process.
            if "WouldBlock" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


class Engine:
    """The open shards of one process, by number."""

    def __init__(self, log_release_seconds: float = LOG_RELEASE_SECONDS) -> None:
        """Hold no shard yet; let go of the logs' pages at most every ``log_release_seconds``."""
        self._shards: dict[int, qe.EdgeShard] = {}
        self._logs: dict[int, Path] = {}  # each shard's write-ahead log folder
        self._log_release_seconds = log_release_seconds
        self._released_at = time.monotonic()
        self._next = 1

    def open(self, spec: ShardSpec) -> Opened:
        """Load the shard in the folder if it holds one, else create it; add missing indexes.

        Passing the config makes Edge refuse a shard built with another dimension, and
        applies the segment bound to a shard created without one.
        """
        folder = Path(spec.folder)
        config = edge_config(
            spec.dimension,
            spec.segment_points,
            payloads_in_ram=spec.payloads_in_ram,
            search_threads=spec.search_threads,
        )
        created = not (folder / CONFIG_FILE).exists()
        if created:
            folder.mkdir(parents=True, exist_ok=True)
            shard = qe.EdgeShard.create(str(folder), config)
        else:
            shard = _load(folder, config, time.monotonic() + HELD_SECONDS)
        existing = shard.info().payload_schema
        for field, schema in _payload_indexes().items():
            if field not in existing:
                shard.update(qe.UpdateOperation.create_field_index(field, schema))
        # Loading read the whole write-ahead log and the payload indexes' files, which Edge
        # then works from memory without: 81 of a loaded 10,000-turn shard's 137 MB of file
        # pages, searched before and after at the same speed, the same hits (pages.py).
        release_shared(folder)
        handle, self._next = self._next, self._next + 1
        self._shards[handle] = shard
        self._logs[handle] = folder / WAL_FOLDER
        return Opened(handle, shard.info().points_count, created)

    def run(self, handle: int, operation: Operation[R]) -> R:
        """Apply the operation to the shard numbered ``handle``."""
        shard = self._shards.get(handle)
        if shard is None:
            raise RuntimeError(f"no Edge shard is open under number {handle}")
        result = operation.apply(shard)
        if operation.writes and time.monotonic() - self._released_at > self._log_release_seconds:
            self._release_logs()
        return result

    def _release_logs(self) -> None:
        """Let go of the pages the shards' write-ahead logs were written through: Edge reads
        a log only when it loads the shard (ingest left ~25 MB of it in the index host)."""
        for folder in self._logs.values():
            release_shared(folder)
        self._released_at = time.monotonic()

    def close(self, handle: int) -> None:
        """Flush the shard's pending writes to its folder and release it."""
        shard = self._shards.pop(handle, None)
        self._logs.pop(handle, None)
        if shard is not None:
            shard.flush()
            shard.close()
            # Edge frees the shard's structures into the C heap, which keeps them: the index
            # host at rest after 10,000 turns (its old generation closed) 192 -> 162 MB.
            trim_heap()

    def close_all(self) -> None:
        """Flush and release every shard."""
        for handle in list(self._shards):
            self.close(handle)
