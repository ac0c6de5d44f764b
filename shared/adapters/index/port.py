"""The search-index port: what a point, a scope and a hit are, and what an index can do."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from uuid import UUID

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "DenseVector",
    "Hit",
    "IndexPayload",
    "IndexPoint",
    "Kind",
    "ScopeFilter",
    "SearchIndex",
]

Kind = Literal["turn", "page", "segment", "fact", "memory"]
DenseVector = list[float] | NDArray[np.floating[Any]]


class IndexPayload(BaseModel):
    """Scope and filtering fields stored with every indexed item."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str = Field(min_length=1)
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None
    kind: Kind
    category: str | None = None
    memory_type: str | None = None
    # Neutral midpoint, so an item nobody rated neither gains nor loses in a composite score.
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    evergreen: bool = False
    occurred_at: float = Field(description="When it happened, in epoch seconds.")
    turn_id: str | None = None
    source_event_id: UUID | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class IndexPoint(BaseModel):
    """One retrievable item: its id, dense embedding, text (for BM25) and payload."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    id: UUID
    dense: DenseVector
    text: str
    payload: IndexPayload


class ScopeFilter(BaseModel):
    """Which points a search, count or delete may touch; always inside one tenant.

    Every optional field narrows the scope; None means "any". The time window is half-open:
    ``occurred_after <= occurred_at < occurred_before``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str = Field(min_length=1)
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None
    # An empty tuple would read as "match nothing" to one caller and "anything" to another.
    kinds: tuple[Kind, ...] | None = Field(default=None, min_length=1)
    categories: tuple[str, ...] | None = Field(default=None, min_length=1)
    memory_types: tuple[str, ...] | None = Field(default=None, min_length=1)
    occurred_after: float | None = None
    occurred_before: float | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: the point's id, its score in that stream, payload and text.

    Built by the adapters from what they stored (validated when written), so a plain
    dataclass: recall reads ~100 of them a request.
    """

    id: UUID
    score: float
    payload: IndexPayload
    text: str


class SearchIndex(Protocol):
    """A hybrid (dense + BM25) search index; every read and filtered write is tenant-scoped."""

    async def ensure_collection(self) -> None:
        """Open the index, creating its storage, vectors and payload indexes if missing."""
        ...

    async def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert the points, replacing any point with the same id."""
        ...

    async def upsert_changed(self, points: Sequence[IndexPoint]) -> int:
        """Write only the points that differ from what is stored under their ids.

        A point differs when anything stored for it would: payload, text, dense vector or
        BM25 vector (each point stores a digest of them). Return how many were written.
        Replay uses it: a rebuild that gives back what the index holds writes nothing.
        """
        ...

    async def delete(self, ids: Sequence[UUID]) -> None:
        """Delete the points with these ids; unknown ids are ignored."""
        ...

    async def delete_where(self, filter: ScopeFilter) -> None:
        """Delete every point inside the scope."""
        ...

    async def search_dense(
        self, vector: DenseVector, filter: ScopeFilter, limit: int = 10
    ) -> list[Hit]:
        """Return the points in scope nearest to the vector by cosine, best first."""
        ...

    async def search_sparse(self, text: str, filter: ScopeFilter, limit: int = 10) -> list[Hit]:
        """Return the points in scope that best match the text by BM25, best first."""
        ...

    async def count(self, filter: ScopeFilter) -> int:
        """Return how many points are inside the scope."""
        ...

    async def scroll(
        self, offset: UUID | None = None, limit: int = 1_000
    ) -> tuple[list[IndexPoint], UUID | None]:
        """Return up to ``limit`` stored points from ``offset`` on, and the next offset.

        For operators (verify, export), not for requests: it crosses tenants.
        """
        ...

    async def optimize(self) -> None:
        """Merge segments and build the vector indexes; return when they are built."""
        ...

    async def close(self) -> None:
        """Flush pending writes and release the index."""
        ...
