"""Text embeddings: the `Embedder` port, a local MiniLM, an OpenAI-compatible client, a cache."""

from typing import TYPE_CHECKING

from .batching import BatchingEmbedder
from .cache import (
    CachedEmbedder,
    CacheStats,
    EmbeddingStore,
    MemoryEmbeddingStore,
    SqlEmbeddingStore,
    content_hash,
)
from .factory import EmbedderKind, LocalRuntime, build_embedder
from .local import (
    MINILM_DIMENSION,
    MINILM_NAME,
    SentenceTransformerEmbedder,
    bundled_minilm_path,
)
from .onnx import OnnxEmbedder
from .port import (
    Embedder,
    EmbeddingDimensionError,
    EmbeddingError,
    Vectors,
)

if TYPE_CHECKING:
    from .openai_compat import OpenAIEmbedder

__all__ = [
    "MINILM_DIMENSION",
    "MINILM_NAME",
    "BatchingEmbedder",
    "CacheStats",
    "CachedEmbedder",
    "Embedder",
    "EmbedderKind",
    "EmbeddingDimensionError",
    "EmbeddingError",
    "EmbeddingStore",
    "LocalRuntime",
    "MemoryEmbeddingStore",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "SqlEmbeddingStore",
    "Vectors",
    "build_embedder",
    "bundled_minilm_path",
    "content_hash",
]


def __getattr__(name: str) -> object:
    # The openai package takes ~0.9 s to import here, and the embedded default (the local
    # model) never uses it: imported on first use, so `memoryd up` starts that much sooner.
    if name == "OpenAIEmbedder":
        from .openai_compat import OpenAIEmbedder

        return OpenAIEmbedder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
