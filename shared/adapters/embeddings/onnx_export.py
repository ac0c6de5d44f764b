"""Export a sentence-transformers BERT model to ONNX, once, from its local weights.

Runs in a child process (``python -m memoryd.shared.adapters.embeddings.onnx_export``) so
the serving process never imports torch: torch is needed to export, not to embed. The
result lands in the model cache under a name derived from the weights it came from; a
second start finds it there. ``int8`` adds ONNX Runtime's dynamic quantisation (weights
per channel, only the matrix products with a constant side).

The export keeps its large weights beside the graph, in a data file (``data_file``), each at an
offset a multiple of 64 KiB. ONNX Runtime then maps them from the file instead of copying
them out of the graph: the matrix products' weights, which it re-lays out for its kernels
(pre-packing), are unmapped once that copy is made, and the word embeddings, which it only
gathers rows from, are read a page at a time as texts use them. Inline, every weight was
copied into each session and the products' kept beside their pre-packed copy. The workers'
and recall's two sessions of the fp32 MiniLM, having run a few batches: 249-265 MB of the
process inline, 178 MB from the data file (107 anonymous, 71 of the file's pages, most of them
the word embeddings' rows and their neighbours), the hidden states equal to the bit
(docs/performance.md, session 44).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# Part of the export's name: an export made another way is made again, not reused.
_EXPORT_FORMAT = "eager-attention|external-64k"
DATA_SUFFIX = ".data"
# A weight of at least this many bytes goes to the data file, at an offset a multiple of the
# same: on Linux ONNX Runtime maps a weight whose offset is a multiple of the page size, and
# Windows' mapping granularity is 64 KiB. Smaller ones (biases, norms) stay in the graph.
EXTERNAL_BYTES = 65_536


def export_name(model_dir: Path, name: str, *, int8: bool) -> str:
    """Return the file name of ``model_dir``'s export: its config and weights' size hashed."""
    digest = hashlib.sha256((model_dir / "config.json").read_bytes())
    digest.update(_EXPORT_FORMAT.encode())
    for weights in sorted(model_dir.glob("*.safetensors")) + sorted(model_dir.glob("*.bin")):
        digest.update(f"{weights.name}:{weights.stat().st_size}".encode())
    suffix = "-int8" if int8 else ""
    return f"{name}-{digest.hexdigest()[:12]}{suffix}.onnx"


def data_file(exported: Path) -> Path:
    """Return the file that holds the large weights of the export ``exported``."""
    return exported.with_name(exported.name + DATA_SUFFIX)


def ensure_export(model_dir: Path, cache_dir: Path, name: str, *, int8: bool) -> Path:
    """Return the ONNX file of ``model_dir``, exporting it in a child process if missing."""
    target = cache_dir / export_name(model_dir, name, int8=int8)
    if target.exists() and data_file(target).exists():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", __name__, str(model_dir), str(target)]
    if int8:
        command.append("--int8")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not target.exists():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"exporting {model_dir} to ONNX failed: {last}")
    return target


def export(model_dir: Path, target: Path, *, int8: bool) -> None:
    """Write ``model_dir``'s transformer as ONNX to ``target`` and its data file.

    The data file is in place before the graph that names it, and each is renamed into place
    whole: a reader that finds the graph finds its weights. A concurrent exporter writes the
    same bytes.
    """
    # The quantiser leaves scratch files in the working directory: work in the temporary one.
    with tempfile.TemporaryDirectory(dir=target.parent) as work, contextlib.chdir(work):
        plain = Path(work) / "model.onnx"
        _export_fp32(model_dir, plain)
        result = plain
        if int8:
            result = Path(work) / "model.int8.onnx"
            _quantize(plain, Path(work), result)
        graph = Path(work) / target.name
        externalise(result, graph)
        data_file(graph).replace(data_file(target))
        graph.replace(target)


def externalise(model: Path, target: Path) -> None:
    """Write ``model`` to ``target`` with each weight of ``EXTERNAL_BYTES`` or more moved to
    ``data_file(target)``, at an offset a multiple of ``EXTERNAL_BYTES``; nothing else changes.
    """
    import onnx

    graph = onnx.load(str(model))
    with data_file(target).open("wb") as data:
        for tensor in graph.graph.initializer:
            raw = tensor.raw_data
            if len(raw) < EXTERNAL_BYTES:
                continue
            data.write(bytes(-data.tell() % EXTERNAL_BYTES))
            place = {"location": data_file(target).name, "offset": data.tell(), "length": len(raw)}
            data.write(raw)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            del tensor.external_data[:]
            for key, value in place.items():
                tensor.external_data.add(key=key, value=str(value))
    onnx.save(graph, str(target))


def _export_fp32(model_dir: Path, target: Path) -> None:
    import torch
    from transformers import AutoModel

    # Eager attention exports a smaller graph than SDPA's (no mask arithmetic per layer: as
    # ONNX Runtime optimises them, 19 Gather and 9 Shape nodes instead of 43 and 27, no Where)
    # and ONNX Runtime fuses its GELU. Same vectors (max difference 3e-7); 2,424 LongMemEval
    # keys, two threads: 78-79 -> 84-87 texts/s here.
    bert = AutoModel.from_pretrained(
        str(model_dir), local_files_only=True, attn_implementation="eager"
    ).eval()

    class HiddenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert  # a submodule: its weights are the graph's initialisers

        def forward(self, input_ids, attention_mask, token_type_ids):  # type: ignore[no-untyped-def]
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    ids = torch.ones(2, 16, dtype=torch.long)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    with torch.no_grad():
        torch.onnx.export(
            HiddenStates(),
            (ids, torch.ones_like(ids), torch.zeros_like(ids)),
            str(target),
            input_names=list(_INPUTS),
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


def _quantize(plain: Path, work: Path, target: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = work / "model.pre.onnx"
    quant_pre_process(str(plain), str(prepared), skip_symbolic_shape=True)
    quantize_dynamic(
        str(prepared),
        str(target),
        weight_type=QuantType.QInt8,
        per_channel=True,
        extra_options={"MatMulConstBOnly": True},
    )


def main() -> None:
    """Export the model folder given on the command line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--int8", action="store_true")
    args = parser.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    export(args.model_dir, args.target, int8=args.int8)


if __name__ == "__main__":
    main()
