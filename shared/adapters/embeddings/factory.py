"""Build an embedder from its kind and settings, for the composition roots."""

from pathlib import Path
from typing import Any, Literal

from .local import SentenceTransformerEmbedder
from .onnx import OnnxEmbedder
from .port import Embedder
from .runners import CPUINFO, Engine, cpu_flags, cpu_may_compute_bf16, openvino_bf16

EmbedderKind = Literal["local", "openai"]
LocalRuntime = Literal["auto", "openvino", "onnx", "onnx-int8", "torch"]


def build_embedder(kind: EmbedderKind, runtime: LocalRuntime = "auto", **settings: Any) -> Embedder:
    """Build the `kind` embedder, passing `settings` to its constructor.

    A local model runs its ONNX export on OpenVINO (`openvino`: bfloat16 where the CPU has
    it, 0.99999 cosine to fp32), on ONNX Runtime (`onnx`, the same vectors as torch;
    `onnx-int8`, the quantised export: faster, 0.993 cosine), or on torch; `auto` is the
    first where this CPU computes in bfloat16, the second elsewhere (``chosen_runtime``).
    """
    if kind == "local":
        runtime = chosen_runtime(runtime)
        if runtime == "torch":
            return SentenceTransformerEmbedder(**settings)
        return OnnxEmbedder(int8=runtime == "onnx-int8", engine=engine_of(runtime), **settings)
    if kind == "openai":
        from .openai_compat import OpenAIEmbedder  # the openai package: only when asked for

        return OpenAIEmbedder(**settings)
    raise ValueError(f"unknown embedder kind {kind!r}: expected 'local' or 'openai'")


def chosen_runtime(runtime: LocalRuntime, cpuinfo: Path = CPUINFO) -> LocalRuntime:
    """Return the runtime ``auto`` stands for here (any other as it is).

    OpenVINO where it computes in bfloat16 (about 1.8x ONNX Runtime's rate on a CPU with
    AVX512-BF16); elsewhere ONNX Runtime, which there ran as fast or faster in fp32 and held
    less memory (an AVX2 CPU: 113-121 against 104-105 texts/s alone, a lone question 14.5
    against 17.5 ms, `memoryd up` at 1,000 turns 585 against 814 MB peak). Without the
    openvino package, ONNX Runtime. A CPU whose flags (``cpuinfo``) rule bfloat16 out gets ONNX
    Runtime without asking OpenVINO, which would load it for the answer.
    """
    if runtime != "auto":
        return runtime
    if not cpu_may_compute_bf16(cpu_flags(cpuinfo)):
        return "onnx"
    try:
        return "openvino" if openvino_bf16() else "onnx"
    except ImportError:
        return "onnx"


def engine_of(runtime: LocalRuntime) -> Engine:
    """Return the engine that runs a local runtime's ONNX export."""
    return "openvino" if runtime == "openvino" else "onnxruntime"
