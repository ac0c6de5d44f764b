"""Text embeddings: the `Embedder` port, a local MiniLM, an OpenAI-compatible client, a cache."""

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
from .openai_compat import OpenAIEmbedder
from .port import (
    Embedder,
    EmbeddingDimensionError,
    EmbeddingError,
    Vectors,
)

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
