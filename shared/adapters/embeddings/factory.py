"""Build an embedder from its kind and settings, for the composition roots."""

from typing import Any, Literal

from .local import SentenceTransformerEmbedder
from .openai_compat import OpenAIEmbedder
from .port import Embedder

EmbedderKind = Literal["local", "openai"]


def build_embedder(kind: EmbedderKind, **settings: Any) -> Embedder:
    """Build the `kind` embedder, passing `settings` to its constructor."""
    if kind == "local":
        return SentenceTransformerEmbedder(**settings)
    if kind == "openai":
        return OpenAIEmbedder(**settings)
    raise ValueError(f"unknown embedder kind {kind!r}: expected 'local' or 'openai'")
