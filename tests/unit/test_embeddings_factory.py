"""Tests for build_embedder."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memoryd.shared.adapters.embeddings import (
    OnnxEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    build_embedder,
)
from memoryd.shared.adapters.embeddings.factory import chosen_runtime
from memoryd.shared.adapters.embeddings.runners import (
    cpu_flags,
    cpu_may_compute_bf16,
    openvino_bf16,
    widened,
)

AVX2_CPU = "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu sse2 avx avx2 fma\n"
ARM_CPU = "processor\t: 0\nFeatures\t: fp asimd bf16\n"


def test_local_kind_builds_minilm_without_loading_it() -> None:
    """The local kind is the bundled MiniLM, 384 wide; by default on OpenVINO in bfloat16
    where this CPU computes in it (another model's vectors, a name of their own), elsewhere on
    ONNX Runtime under fp32's name."""
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


def test_auto_is_openvino_where_the_cpu_has_bfloat16_and_onnx_runtime_elsewhere() -> None:
    """``auto`` follows this CPU; a runtime asked for by name is kept as it is."""
    expected = "openvino" if openvino_bf16() else "onnx"

    assert expected == chosen_runtime("auto")
    assert ["openvino", "onnx", "onnx-int8", "torch"] == [
        chosen_runtime(name) for name in ("openvino", "onnx", "onnx-int8", "torch")
    ]


def test_the_cpus_flags_say_where_bfloat16_is_ruled_out(tmp_path: Path) -> None:
    """x86 Linux lists the flags; elsewhere they are unknown, and unknown rules nothing out."""
    avx2, arm = tmp_path / "avx2", tmp_path / "arm"
    avx2.write_text(AVX2_CPU)
    arm.write_text(ARM_CPU)

    assert frozenset({"fpu", "sse2", "avx", "avx2", "fma"}) == cpu_flags(avx2)
    assert (None, None) == (cpu_flags(arm), cpu_flags(tmp_path / "absent"))
    assert [False, True, True, True, True] == [
        cpu_may_compute_bf16(flags)
        for flags in (
            cpu_flags(avx2),
            None,
            frozenset({"avx512f", "avx512_bf16"}),
            frozenset({"amx_bf16"}),
            frozenset({"avx2", "avx_vnni"}),
        )
    ]


def test_openvino_never_computes_in_bfloat16_where_the_flags_rule_it_out() -> None:
    """The rule agrees with OpenVINO on this machine's CPU (it may only say more)."""
    assert openvino_bf16() <= cpu_may_compute_bf16(cpu_flags())


def test_auto_on_a_cpu_without_bfloat16_never_loads_openvino(tmp_path: Path) -> None:
    """OpenVINO and its CPU plugin cost 71 MB and ~1 s to answer no on an AVX2 CPU."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AVX2_CPU)
    probe = (
        "import sys\n"
        "from pathlib import Path\n"
        "from memoryd.shared.adapters.embeddings.factory import chosen_runtime\n"
        f"print(chosen_runtime('auto', Path({str(cpuinfo)!r})), 'openvino' in sys.modules)\n"
    )
    said = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert "onnx False" == said.stdout.strip()


def test_auto_without_the_openvino_package_is_onnx_runtime(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An install without openvino still starts with ``auto``: on ONNX Runtime."""
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` raises ImportError
    openvino_bf16.cache_clear()
    try:
        assert "onnx" == chosen_runtime("auto")
    finally:
        openvino_bf16.cache_clear()


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
