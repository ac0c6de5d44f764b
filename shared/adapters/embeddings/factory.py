"""Build an embedder from its kind and settings, for the composition roots."""

from typing import Any, Literal

from .local import SentenceTransformerEmbedder
from .onnx import OnnxEmbedder
from .port import Embedder
from .runners import Engine

EmbedderKind = Literal["local", "openai"]
LocalRuntime = Literal["openvino", "onnx", "onnx-int8", "torch"]


def build_embedder(
    kind: EmbedderKind, runtime: LocalRuntime = "openvino", **settings: Any
) -> Embedder:
    """Build the `kind` embedder, passing `settings` to its constructor.

    A local model runs its ONNX export on OpenVINO (`openvino`: bfloat16 where the CPU has
    it, 0.99999 cosine to fp32), on ONNX Runtime (`onnx`, the same vectors as torch;
    `onnx-int8`, the quantised export: faster, 0.993 cosine), or on torch.
    """
    if kind == "local":
        if runtime == "torch":
            return SentenceTransformerEmbedder(**settings)
        return OnnxEmbedder(int8=runtime == "onnx-int8", engine=engine_of(runtime), **settings)
    if kind == "openai":
        from .openai_compat import OpenAIEmbedder  # the openai package: only when asked for

        return OpenAIEmbedder(**settings)
    raise ValueError(f"unknown embedder kind {kind!r}: expected 'local' or 'openai'")


def engine_of(runtime: LocalRuntime) -> Engine:
    """Return the engine that runs a local runtime's ONNX export."""
    return "openvino" if runtime == "openvino" else "onnxruntime"
