"""The hybrid search index: dense (cosine) and BM25 (sparse, IDF) search, scoped by tenant."""

from pathlib import Path

from memoryd.shared.adapters.index.edge import EdgeSearchIndex, Optimizing
from memoryd.shared.adapters.index.port import (
    DenseVector,
    Hit,
    IndexPayload,
    IndexPoint,
    Kind,
    ScopeFilter,
    SearchIndex,
)
from memoryd.shared.adapters.index.sparse import DEFAULT_AVG_LEN

__all__ = [
    "DenseVector",
    "EdgeSearchIndex",
    "Hit",
    "IndexPayload",
    "IndexPoint",
    "Kind",
    "Optimizing",
    "ScopeFilter",
    "SearchIndex",
    "build_index",
]


def build_index(
    url: str | None,
    path: str | Path,
    dimension: int = 384,
    *,
    api_key: str | None = None,
    collection: str = "memoryd",
    avg_len: float = DEFAULT_AVG_LEN,
    optimizing: Optimizing | None = None,
    segment_points: int | None = None,
) -> SearchIndex:
    """Return an unopened index: Qdrant Edge at `path` without a URL, a Qdrant server with one.

    Open it with `ensure_collection()`. `path`, `optimizing` and `segment_points` apply to
    Edge only (a server optimises in the background); `api_key` and `collection` to a server
    only.
    """
    if url is None:
        return EdgeSearchIndex(
            path,
            dimension,
            avg_len=avg_len,
            optimizing=optimizing or Optimizing(),
            segment_points=segment_points,
        )
    # Imported here: qdrant-client costs about a second and ~40 MB, and only a server needs it.
    from memoryd.shared.adapters.index.server import QdrantServerIndex

    return QdrantServerIndex(
        url, dimension, api_key=api_key, collection=collection, avg_len=avg_len
    )
