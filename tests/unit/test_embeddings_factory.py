"""Tests for build_embedder."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import numpy as np
import pytest

from memoryd.shared.adapters.embeddings import (
    OnnxEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    build_embedder,
)
from memoryd.shared.adapters.embeddings.runners import openvino_bf16, widened


def test_local_kind_builds_minilm_on_openvino_without_loading_it() -> None:
    """The local kind is the bundled MiniLM, 384 wide, on OpenVINO by default: its name says
    bfloat16 where this CPU computes in it (another model's vectors), fp32's name elsewhere."""
    embedder = build_embedder("local", batch_tokens=1024)
    name = "all-MiniLM-L6-v2-bf16" if openvino_bf16() else "all-MiniLM-L6-v2"

    assert isinstance(embedder, OnnxEmbedder)
    assert (name, 384, 1024, False) == (
        embedder.model_name,
        embedder.dimension,
        embedder.batch_tokens,
        embedder.loaded,
    )


def test_the_torch_onnx_and_int8_runtimes_are_chosen_by_name() -> None:
    """torch builds the sentence-transformers model; onnx keeps fp32's name (torch's
    vectors); onnx-int8 is a model of its own name."""
    torch_model = build_embedder("local", "torch", batch_size=16)
    onnx_model = build_embedder("local", "onnx")
    int8_model = build_embedder("local", "onnx-int8")

    assert isinstance(torch_model, SentenceTransformerEmbedder)
    assert "all-MiniLM-L6-v2" == onnx_model.model_name == torch_model.model_name
    assert "all-MiniLM-L6-v2-int8" == int8_model.model_name


def test_the_int8_export_does_not_run_on_openvino() -> None:
    """int8 is ONNX Runtime's quantised export: asked of OpenVINO, refused at construction."""
    with pytest.raises(ValueError, match="ONNX Runtime"):
        OnnxEmbedder(int8=True, engine="openvino")


def test_openai_kind_builds_a_client_for_the_endpoint() -> None:
    """The openai kind embeds with the named model at the given width."""
    embedder = build_embedder(
        "openai",
        model="text-embedding-3-small",
        dimension=1536,
        base_url="http://127.0.0.1:1/v1",
        api_key="unused",
    )

    assert isinstance(embedder, OpenAIEmbedder)
    assert ("text-embedding-3-small", 1536) == (embedder.model_name, embedder.dimension)


def test_unknown_kind_is_refused_with_the_choices() -> None:
    """A misspelt kind names the kinds that exist."""
    with pytest.raises(ValueError, match="'local' or 'openai'"):
        build_embedder("lokal", batch_size=1)  # type: ignore[arg-type]


def test_batches_widen_to_the_next_multiple_of_the_step_with_zeros() -> None:
    """OpenVINO runs a batch padded to a multiple of 8 tokens (fewer shapes to prepare): the
    added columns are zeros, so the mask leaves them out; a width on the step stays as it is."""
    rows = np.array([[5, 6, 7], [9, 0, 0]], dtype=np.int64)

    assert [[5, 6, 7, 0], [9, 0, 0, 0]] == widened(rows, 4).tolist()
    assert rows is widened(rows, 3)
