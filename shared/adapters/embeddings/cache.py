"""An embedding cache keyed by (model, sha256 of text), in memory or in SQL.

The SQL store outlives the process, so replaying the event log rebuilds the search index
without running the model again.
"""

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeAlias

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict
from sqlalchemy import Column, Insert, LargeBinary, MetaData, String, Table, delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from ._vectors import chunked, empty_rows
from .port import Embedder, Vectors

Vector: TypeAlias = npt.NDArray[np.float32]
"""One unit row of a `Vectors` matrix."""

# float32, little-endian: the stored bytes mean the same on every machine.
_STORED_DTYPE = np.dtype("<f4")
_KEY_COLUMNS = ("model", "content_hash")


def content_hash(text: str) -> str:
    """Return the hex sha256 of `text` as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class CacheStats(BaseModel):
    """Distinct texts served from the store (hits) and sent to the model (misses)."""

    model_config = ConfigDict(frozen=True)

    hits: int = 0
    misses: int = 0

    @property
    def hit_rate(self) -> float:
        """Return the share of lookups the store answered, 0.0 before any lookup."""
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0


class EmbeddingStore(Protocol):
    """Keep vectors by (model, content hash)."""

    async def get_many(self, model: str, content_hashes: Sequence[str]) -> dict[str, Vector]:
        """Return the stored vectors among `content_hashes`, keyed by hash."""
        ...

    async def put_many(self, model: str, vectors: Mapping[str, Vector]) -> None:
        """Store `vectors` keyed by content hash, keeping any vector already stored."""
        ...


class CachedEmbedder:
    """Embed through `inner`, running it only on texts the store does not hold."""

    def __init__(self, inner: Embedder, store: EmbeddingStore, *, batch_size: int = 256) -> None:
        """Send misses to `inner` in batches of `batch_size`, storing each batch as it lands."""
        self._inner = inner
        self._store = store
        self._batch_size = batch_size
        self._hits = 0
        self._misses = 0
        # Misses being embedded now: a call that misses the same text waits for that vector.
        self._embedding: dict[str, asyncio.Future[Vector]] = {}

    @property
    def model_name(self) -> str:
        """Name the inner model: cached vectors are only valid for it."""
        return self._inner.model_name

    @property
    def dimension(self) -> int:
        """Return the inner model's vector width."""
        return self._inner.dimension

    @property
    def stats(self) -> CacheStats:
        """Return the hits and misses counted so far, per distinct text of each call."""
        return CacheStats(hits=self._hits, misses=self._misses)

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Return one row per text in input order, embedding each distinct miss once."""
        if not texts:
            return empty_rows(self.dimension)
        hashes = [content_hash(text) for text in texts]
        distinct = dict(zip(hashes, texts, strict=True))
        vectors = await self._store.get_many(self.model_name, list(distinct))
        missing = [(key, text) for key, text in distinct.items() if key not in vectors]
        joined = {key: self._embedding[key] for key, _ in missing if key in self._embedding}
        own = [(key, text) for key, text in missing if key not in joined]
        vectors.update(await self._embed_own(own))
        for key, pending in joined.items():
            try:
                vectors[key] = await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this call was cancelled, not the one it waited on
                vectors.update(await self._embed_own([(key, distinct[key])]))
        self._hits += len(distinct) - len(own)
        self._misses += len(own)
        return np.stack([vectors[key] for key in hashes])

    async def _embed_own(self, missing: Sequence[tuple[str, str]]) -> dict[str, Vector]:
        """Embed and store ``missing``, letting concurrent calls for the same texts wait on it.

        Batch by batch: a failure late in a long replay keeps the batches already stored,
        and a call waiting on a text gets its vector once that text's batch is stored (a
        later batch's error reaches only the calls waiting on that batch's texts).
        """
        if not missing:
            return {}
        loop = asyncio.get_running_loop()
        pending = {key: loop.create_future() for key, _ in missing}
        self._embedding.update(pending)
        fresh: dict[str, Vector] = {}
        try:
            for batch in chunked(missing, self._batch_size):
                rows = await self._inner.embed([text for _, text in batch])
                embedded = {key: row for (key, _), row in zip(batch, rows, strict=True)}
                await self._store.put_many(self.model_name, embedded)
                fresh.update(embedded)
                for key, row in embedded.items():
                    pending[key].set_result(row)
        except asyncio.CancelledError:
            for future in pending.values():
                future.cancel()  # a waiting call embeds the text itself (no-op once resolved)
            raise
        except Exception as error:
            for future in pending.values():
                if not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved: raised to each waiter, logged by none
            raise
        finally:
            for key in pending:
                self._embedding.pop(key, None)
        return fresh


class MemoryEmbeddingStore:
    """Keep at most `max_entries` vectors in process memory, evicting the least recently used."""

    def __init__(self, max_entries: int = 100_000) -> None:
        """Hold up to `max_entries` vectors (384 floats each: ~150 MB for 100,000)."""
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], Vector] = OrderedDict()

    def __len__(self) -> int:
        """Return how many vectors are held."""
        return len(self._entries)

    async def get_many(self, model: str, content_hashes: Sequence[str]) -> dict[str, Vector]:
        """Return the held vectors among `content_hashes`, marking them recently used."""
        found: dict[str, Vector] = {}
        for key in content_hashes:
            vector = self._entries.get((model, key))
            if vector is not None:
                self._entries.move_to_end((model, key))
                found[key] = vector
        return found

    async def put_many(self, model: str, vectors: Mapping[str, Vector]) -> None:
        """Hold copies of `vectors`, then evict the least recently used over capacity."""
        for key, vector in vectors.items():
            # A copy: a row view would keep its whole batch matrix alive after eviction.
            self._entries.setdefault((model, key), np.array(vector, dtype=np.float32))
            self._entries.move_to_end((model, key))
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)


class SqlEmbeddingStore:
    """Keep vectors in an `embedding_cache` table on SQLite or PostgreSQL."""

    def __init__(
        self, engine: AsyncEngine, *, table_name: str = "embedding_cache", chunk_size: int = 500
    ) -> None:
        """Use `table_name` in its own MetaData; `chunk_size` bounds rows per statement."""
        self._engine = engine
        self._chunk_size = chunk_size
        self.metadata = MetaData()
        self.table = Table(
            table_name,
            self.metadata,
            Column("model", String(200), primary_key=True),
            Column("content_hash", String(64), primary_key=True),
            Column("vector", LargeBinary, nullable=False),
        )
        self._insert = _insert_keeping_existing(self.table, engine.dialect.name)

    async def create_schema(self) -> None:
        """Create the table if it does not exist."""
        async with self._engine.begin() as connection:
            await connection.run_sync(self.metadata.create_all)

    async def get_many(self, model: str, content_hashes: Sequence[str]) -> dict[str, Vector]:
        """Return the stored vectors among `content_hashes`, one IN query per chunk."""
        columns = self.table.c
        found: dict[str, Vector] = {}
        async with self._engine.connect() as connection:
            for chunk in chunked(content_hashes, self._chunk_size):
                query = select(columns.content_hash, columns.vector).where(
                    columns.model == model, columns.content_hash.in_(chunk)
                )
                for key, blob in await connection.execute(query):
                    found[key] = np.frombuffer(blob, dtype=_STORED_DTYPE).astype(np.float32)
        return found

    async def put_many(self, model: str, vectors: Mapping[str, Vector]) -> None:
        """Insert `vectors` in one transaction, skipping keys already stored."""
        rows = [
            {"model": model, "content_hash": key, "vector": vector.astype(_STORED_DTYPE).tobytes()}
            for key, vector in vectors.items()
        ]
        async with self._engine.begin() as connection:
            for chunk in chunked(rows, self._chunk_size):
                await connection.execute(self._insert, list(chunk))

    async def forget(self, content_hashes: Sequence[str]) -> int:
        """Delete the vectors of these texts under every model; return how many went."""
        gone = 0
        async with self._engine.begin() as connection:
            for chunk in chunked(content_hashes, self._chunk_size):
                query = delete(self.table).where(self.table.c.content_hash.in_(chunk))
                gone += (await connection.execute(query)).rowcount or 0
        return gone


def _insert_keeping_existing(table: Table, dialect: str) -> Insert:
    """Return an INSERT that skips rows whose key is already stored, in `dialect`'s syntax."""
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=_KEY_COLUMNS)
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=_KEY_COLUMNS)
    raise ValueError(f"SqlEmbeddingStore runs on sqlite or postgresql, not {dialect}")
