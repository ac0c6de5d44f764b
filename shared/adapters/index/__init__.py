"""The hybrid search index: dense (cosine) and BM25 (sparse, IDF) search, scoped by tenant.

The names below load on first use (PEP 562): a process that needs one module of the adapter
(the optimising child runs ``edge_build`` alone) does not import the rest with the package.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from memoryd.shared.adapters.index.edge import EdgeOptions, EdgeSearchIndex, Optimizing
    from memoryd.shared.adapters.index.port import (
        DenseVector,
        Hit,
        IndexPayload,
        IndexPoint,
        Kind,
        ScopeFilter,
        SearchIndex,
    )

__all__ = [
    "DenseVector",
    "EdgeOptions",
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

# Where each public name lives.
_MODULES = {
    "EdgeOptions": "edge",
    "EdgeSearchIndex": "edge",
    "Optimizing": "edge",
    **dict.fromkeys(
        ("DenseVector", "Hit", "IndexPayload", "IndexPoint", "Kind", "ScopeFilter", "SearchIndex"),
        "port",
    ),
}


def __getattr__(name: str) -> object:
    """Import the module that holds ``name`` and return it (PEP 562)."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup skips this function
    return value


def build_index(
    url: str | None,
    path: str | Path,
    dimension: int = 384,
    *,
    api_key: str | None = None,
    collection: str = "memoryd",
    edge: EdgeOptions | None = None,
) -> SearchIndex:
    """Return an unopened index: Qdrant Edge at `path` without a URL, a Qdrant server with one.

    Open it with `ensure_collection()`. `path` and `edge` (how it optimises, lays out and
    hosts its shard) apply to Edge only; `api_key` and `collection` to a server only.
    """
    if url is None:
        from memoryd.shared.adapters.index.edge import EdgeOptions, EdgeSearchIndex

        options = edge or EdgeOptions()
        return EdgeSearchIndex(
            path,
            dimension,
            optimizing=options.optimizing,
            segment_points=options.segment_points,
            payloads_in_ram=options.payloads_in_ram,
            hosted=options.hosted,
        )
    # Imported here: qdrant-client costs about a second and ~40 MB, and only a server needs it.
    from memoryd.shared.adapters.index.server import QdrantServerIndex

    return QdrantServerIndex(url, dimension, api_key=api_key, collection=collection)
