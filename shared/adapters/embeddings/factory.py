"""Build an embedder from its kind and settings, for the composition roots."""

from typing import Any, Literal

from .local import SentenceTransformerEmbedder
from .onnx import OnnxEmbedder
from .port import Embedder

EmbedderKind = Literal["local", "openai"]
LocalRuntime = Literal["onnx", "onnx-int8", "torch"]


def build_embedder(kind: EmbedderKind, runtime: LocalRuntime = "onnx", **settings: Any) -> Embedder:
    """Build the `kind` embedder, passing `settings` to its constructor.

    A local model runs on ONNX Runtime (`onnx`, the same vectors as torch; `onnx-int8`, the
    quantised export: faster, slightly different vectors) or on torch.
    """
    if kind == "local":
        if runtime == "torch":
            return SentenceTransformerEmbedder(**settings)
        return OnnxEmbedder(int8=runtime == "onnx-int8", **settings)
    if kind == "openai":
        from .openai_compat import OpenAIEmbedder  # the openai package: only when asked for

        return OpenAIEmbedder(**settings)
    raise ValueError(f"unknown embedder kind {kind!r}: expected 'local' or 'openai'")
