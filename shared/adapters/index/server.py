"""Search index on a Qdrant server or cluster, through `qdrant_client.AsyncQdrantClient`."""

import asyncio
import time
from collections.abc import Sequence
from typing import Any
from uuid import UUID

import structlog
from qdrant_client import AsyncQdrantClient, models

from memoryd.shared.adapters.index._mapping import (
    best_first,
    changed,
    dense_values,
    hit_from_stored,
    past_the_cut,
    point_from_stored,
    scope_conditions,
    stored_digests,
    stored_payload,
)
from memoryd.shared.adapters.index.layout import DENSE_VECTOR, SPARSE_VECTOR
from memoryd.shared.adapters.index.port import DenseVector, Hit, IndexPoint, ScopeFilter
from memoryd.shared.adapters.index.sparse import (
    DEFAULT_AVG_LEN,
    SparseVector,
    document_vector,
    encoding,
    query_vector,
)
from memoryd.shared.adapters.index.stored import (
    DIGEST_KEY,
    KEYWORD_FIELDS,
    TENANT_FIELD,
    TIME_FIELD,
    Condition,
    MatchAny,
)

__all__ = ["QdrantServerIndex"]

_log = structlog.get_logger(__name__)
# Keeps one upsert request far below the server's 32 MB default body limit (a 384-d point with
# its payload is a few kB of JSON).
_UPSERT_BATCH = 512
# Filter-aware HNSW links only for the fields searches are narrowed by; see edge.py.
_HNSW_FIELDS = frozenset({TENANT_FIELD, "user_id"})
_POLL_SECONDS = 0.2


class QdrantServerIndex:
    """Search index in one collection of a Qdrant server, cluster or qdrant-client local mode.

    `url` is a server address (``http://qdrant:6333``) or ``":memory:"`` for qdrant-client's
    in-process local mode, which tests use. Local mode brute-forces every search and ignores
    payload indexes, but it applies filters and the IDF modifier like the server does.
    """

    def __init__(
        self,
        url: str,
        dimension: int,
        *,
        api_key: str | None = None,
        collection: str = "memoryd",
        avg_len: float = DEFAULT_AVG_LEN,
        timeout: int | None = None,
        optimize_timeout: float = 600.0,
    ) -> None:
        """Build the client; nothing is sent until `ensure_collection()`."""
        if dimension <= 0:
            raise ValueError(f"dimension must be positive, got {dimension}")
        self._client = AsyncQdrantClient(location=url, api_key=api_key, timeout=timeout)
        self._collection = collection
        self._dimension = dimension
        self._avg_len = avg_len
        self._encoding = encoding(avg_len)
        self._optimize_timeout = optimize_timeout

    async def ensure_collection(self) -> None:
        """Create the collection and any missing payload index; check an existing one fits."""
        if await self._client.collection_exists(self._collection):
            await self._check_dimension()
        else:
            await self._client.create_collection(
                self._collection,
                vectors_config={
                    DENSE_VECTOR: models.VectorParams(
                        size=self._dimension, distance=models.Distance.COSINE
                    )
                },
                sparse_vectors_config={
                    SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
            )
            _log.info("server_index.created", collection=self._collection)
        info = await self._client.get_collection(self._collection)
        for field, schema in _payload_indexes().items():
            if field not in info.payload_schema:
                await self._client.create_payload_index(self._collection, field, schema)

    async def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert the points, replacing any point with the same id."""
        # Encoding BM25 costs ~0.3 ms per chat turn: done in a worker thread, off the loop.
        structs = await asyncio.to_thread(self._structs, points)
        await self._send(structs)

    async def upsert_changed(self, points: Sequence[IndexPoint]) -> int:
        """Write the points that differ from what is stored under their ids; return how many.

        Only the points written are encoded for BM25 (the digests name the encoding).
        """
        if not points:
            return 0
        payloads = await asyncio.to_thread(self._payloads, points)
        ids = [point.id for point in points]
        positions = changed(payloads, await self._stored_digests(ids), ids)
        kept = [points[position] for position in positions]
        structs = await asyncio.to_thread(
            self._point_structs, kept, [payloads[position] for position in positions]
        )
        await self._send(structs)
        return len(positions)

    def _structs(self, points: Sequence[IndexPoint]) -> list[models.PointStruct]:
        """Return the server points for the index points, payloads and all."""
        return self._point_structs(points, self._payloads(points))

    def _payloads(self, points: Sequence[IndexPoint]) -> list[dict[str, Any]]:
        """Return the payload each point is stored with, its digest included."""
        return [stored_payload(point, self._encoding) for point in points]

    async def _send(self, structs: Sequence[models.PointStruct]) -> None:
        """Upsert the points, a bounded request at a time."""
        for start in range(0, len(structs), _UPSERT_BATCH):
            batch = structs[start : start + _UPSERT_BATCH]
            await self._client.upsert(self._collection, batch, wait=True)

    async def _stored_digests(self, ids: Sequence[UUID]) -> dict[UUID, str | None]:
        """Return the digest stored with each of these points that exists."""
        records = await self._client.retrieve(
            self._collection,
            [str(point_id) for point_id in ids],
            with_payload=[DIGEST_KEY],
            with_vectors=False,
        )
        return stored_digests(records)

    async def delete(self, ids: Sequence[UUID]) -> None:
        """Delete the points with these ids; unknown ids are ignored."""
        if ids:
            selector = models.PointIdsList(points=[str(point_id) for point_id in ids])
            await self._client.delete(self._collection, selector, wait=True)

    async def delete_where(self, filter: ScopeFilter) -> None:
        """Delete every point inside the scope."""
        selector = models.FilterSelector(filter=_server_filter(filter))
        await self._client.delete(self._collection, selector, wait=True)

    async def search_dense(
        self, vector: DenseVector, filter: ScopeFilter, limit: int = 10
    ) -> list[Hit]:
        """Return the points in scope nearest to the vector by cosine, best first."""
        return await self._search(
            dense_values(vector, self._dimension), DENSE_VECTOR, filter, limit
        )

    async def search_sparse(self, text: str, filter: ScopeFilter, limit: int = 10) -> list[Hit]:
        """Return the points in scope that best match the text by BM25, best first."""
        sparse = query_vector(text)
        if not sparse:
            return []
        return await self._search(_server_sparse(sparse), SPARSE_VECTOR, filter, limit)

    async def count(self, filter: ScopeFilter) -> int:
        """Return how many points are inside the scope."""
        result = await self._client.count(
            self._collection, count_filter=_server_filter(filter), exact=True
        )
        return result.count

    async def scroll(
        self, offset: UUID | None = None, limit: int = 1_000
    ) -> tuple[list[IndexPoint], UUID | None]:
        """Return up to ``limit`` stored points from ``offset`` on, and the next offset."""
        records, following = await self._client.scroll(
            self._collection,
            limit=limit,
            offset=None if offset is None else str(offset),
            with_payload=True,
            with_vectors=[DENSE_VECTOR],
        )
        points = [
            point_from_stored(record.id, _dense_of(record.vector), record.payload or {})
            for record in records
        ]
        return points, None if following is None else UUID(str(following))

    async def optimize(self) -> None:
        """Wait until the server's background optimisers have finished with the collection."""
        # The server optimises on its own; what a caller wants after a bulk load is to know
        # the indexes are built, which the collection reports as status green.
        deadline = time.monotonic() + self._optimize_timeout
        while not await self._is_optimised():
            if time.monotonic() > deadline:
                raise TimeoutError(f"collection {self._collection} still optimising")
            await asyncio.sleep(_POLL_SECONDS)

    async def close(self) -> None:
        """Close the client's connections."""
        await self._client.close()

    async def _is_optimised(self) -> bool:
        """Say whether the collection reports no optimisation running or pending."""
        info = await self._client.get_collection(self._collection)
        return info.status == models.CollectionStatus.GREEN

    async def _check_dimension(self) -> None:
        """Fail if the existing collection's dense vector has another dimension."""
        info = await self._client.get_collection(self._collection)
        vectors = info.config.params.vectors
        params = vectors.get(DENSE_VECTOR) if isinstance(vectors, dict) else None
        if params is None or params.size != self._dimension:
            found = None if params is None else params.size
            raise ValueError(
                f"collection {self._collection} has dense dimension {found},"
                f" expected {self._dimension}"
            )

    async def _search(
        self, query: list[float] | models.SparseVector, using: str, scope: ScopeFilter, limit: int
    ) -> list[Hit]:
        """Run one query in scope and return its hits (equal scores by point id, ``best_first``)."""

        async def search(asked: int) -> list[models.ScoredPoint]:
            response = await self._client.query_points(
                self._collection,
                query=query,
                using=using,
                query_filter=_server_filter(scope),
                limit=asked,
                with_payload=True,
            )
            return response.points

        found = await past_the_cut(search, lambda point: point.score, limit)
        scored = ((point.id, point.score, point.payload or {}) for point in found)
        return [hit_from_stored(*found) for found in best_first(scored, limit)]

    def _point_structs(
        self, points: Sequence[IndexPoint], payloads: Sequence[dict[str, Any]]
    ) -> list[models.PointStruct]:
        """Return the server points: named dense and BM25 vectors, the given payloads."""
        return [
            self._point_struct(point, payload)
            for point, payload in zip(points, payloads, strict=True)
        ]

    def _point_struct(self, point: IndexPoint, payload: dict[str, Any]) -> models.PointStruct:
        """Return one server point: named dense and BM25 vectors, payload with the text."""
        sparse = document_vector(point.text, self._avg_len)
        vectors: dict[str, Any] = {DENSE_VECTOR: dense_values(point.dense, self._dimension)}
        if sparse:
            vectors[SPARSE_VECTOR] = _server_sparse(sparse)
        return models.PointStruct(id=str(point.id), vector=vectors, payload=payload)


def _payload_indexes() -> dict[str, models.KeywordIndexParams | models.FloatIndexParams]:
    """Return the payload index of every filterable field."""
    indexes: dict[str, models.KeywordIndexParams | models.FloatIndexParams] = {
        field: models.KeywordIndexParams(
            type=models.KeywordIndexType.KEYWORD,
            is_tenant=field == TENANT_FIELD,
            enable_hnsw=field in _HNSW_FIELDS,
        )
        for field in KEYWORD_FIELDS
    }
    indexes[TIME_FIELD] = models.FloatIndexParams(
        type=models.FloatIndexType.FLOAT, enable_hnsw=False
    )
    return indexes


def _server_filter(scope: ScopeFilter) -> models.Filter:
    """Return the server filter a point must pass to be in scope."""
    return models.Filter(
        must=[_server_condition(condition) for condition in scope_conditions(scope)]
    )


def _server_condition(condition: Condition) -> models.FieldCondition:
    """Return one server field condition."""
    if isinstance(condition, MatchAny):
        values = condition.values
        match: models.MatchValue | models.MatchAny = (
            models.MatchValue(value=values[0])
            if len(values) == 1
            else models.MatchAny(any=list(values))
        )
        return models.FieldCondition(key=condition.key, match=match)
    return models.FieldCondition(
        key=condition.key, range=models.Range(gte=condition.gte, lt=condition.lt)
    )


def _dense_of(vectors: object) -> list[float]:
    """Return the dense vector of a scrolled record."""
    named = vectors if isinstance(vectors, dict) else {}
    values = named.get(DENSE_VECTOR, [])
    return [float(value) for value in values] if isinstance(values, list) else []


def _server_sparse(sparse: SparseVector) -> models.SparseVector:
    """Return the client's form of a sparse vector."""
    return models.SparseVector(indices=list(sparse.indices), values=list(sparse.values))
