"""The engines that run an exported transformer on a batch of token ids: ONNX Runtime, OpenVINO.

``OnnxEmbedder`` tokenizes, cuts batches, pools and spreads batches over its lanes; a runner
only turns one padded batch into the last hidden state. Both read the same ONNX export.

OpenVINO computes in bfloat16 where the CPU has bfloat16 instructions (AVX512-BF16, AMX),
in float32 elsewhere. Measured on this 2-core machine (AVX512-BF16), the keys of 1,000
LongMemEval turns (2,424 texts, two lanes, batches of 512 tokens): ONNX Runtime fp32 167-188
texts/s, OpenVINO fp32 186-190, OpenVINO bf16 325-335; bf16's vectors at 0.99999 mean cosine
to fp32's (min 0.99991; int8's: 0.993, min 0.93). A text gets the same vector on the next run
and on any lane, to the bit; alone and in a padded batch of another shape, within 0.99999
cosine (bfloat16 sums in another order). A lone 12-token question: 2.3 ms on two threads.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import mmap
import os
import queue
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memoryd.shared.adapters.embeddings.onnx_export import data_file
from memoryd.shared.adapters.pages import release_file

Engine = Literal["onnxruntime", "openvino"]
Ids = npt.NDArray[np.int64]
Hidden = npt.NDArray[np.float32]


def _nothing() -> None:
    """Give back nothing (an engine that holds no working memory to give back)."""


@dataclass(frozen=True, slots=True)
class Runner:
    """A padded batch (token ids, attention mask) -> each token's last hidden state.

    ``release`` gives back the working memory the engine keeps between batches (its buffers
    for the shapes it has run); the next batch makes what it needs again.
    """

    run: Callable[[Ids, Ids], Hidden]
    release: Callable[[], None] = _nothing

    def __call__(self, ids: Ids, mask: Ids) -> Hidden:
        """Run the batch."""
        return self.run(ids, mask)


BF16 = "BF16"  # what OpenVINO's CPU plugin lists among its capabilities when it can use it
# OpenVINO's CPU plugin lists BF16 where oneDNN may use avx512_core_bf16 or avx2_vnni_2
# (src/plugins/intel_cpu/src/plugin.cpp): the first needs the CPU flag avx512_bf16, the second
# avx_vnni (among others). A CPU without any of these cannot compute in bfloat16 there.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "avx_vnni"})
CPUINFO = Path("/proc/cpuinfo")
# OpenVINO keeps what it prepared for each input shape it has run; batches padded to a multiple
# of 8 tokens make far fewer shapes. Alone on 2,424 keys and 300 lone queries: 602 against 724
# MB peak, the same 308-310 texts/s; the padding is masked, so the vectors stay the model's.
WIDTH_STEP = 8
# Each model compiled for the CPU is kept here, beside the export, as OpenVINO exports it (a blob
# per export, precision and OpenVINO release); the next start maps it and imports it instead of
# compiling again (``_compiled``). The bundled MiniLM, bf16, on this 2-core machine: 0.40-0.60 s
# compiled, 0.12-0.14 s read back (its weights then mapped from the 90 MB blob: 95 against 189
# MB anonymous), the hidden states equal to the bit.
COMPILED_FOLDER = "openvino"
LOCK_FILE = ".compiling"


def onnxruntime_runner(exported: Path, threads: int = 1) -> Runner:
    """Return a runner that computes a batch on ``threads`` threads, the calling one included.

    One for the workers' lanes (see ``onnx``). Recall's queries come one or a few at a time,
    where one thread leaves the other core idle: a LongMemEval question (35 tokens) took
    7.5 ms on one thread and 5.4 ms on two (fp32, this 2-core machine), the vectors the same
    to the bit. The helper thread sleeps between operators instead of spinning, so under load
    it takes no core from the event loop.

    ``release`` gives back what the session keeps between batches. Its arena (the memory
    ONNX Runtime computes in, grown to the largest batches' needs and kept) shrinks to what
    runs use at that moment, through a one-token run that asks for it. And the pages of the
    weights file the session maps: ONNX Runtime copies the matrix products' weights when it
    loads, and reads the word and position embeddings' rows from the mapping, whose pages
    the texts so far touched stay resident (for each session that maps the file) until let
    go of; the next texts read theirs back from the page cache. One session having run 60
    batches of 512 tokens on two threads: its arena 108 -> 71 MB of the process in 7 ms, the
    vectors the same to the bit. Without an arena (malloc for each run) the batches held ~50
    MB more while they ran.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        str(exported), options, providers=["CPUExecutionProvider"]
    )

    def run(ids: Ids, mask: Ids) -> Hidden:
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return np.asarray(session.run(["last_hidden_state"], feeds)[0], dtype=np.float32)

    shrink = onnxruntime.RunOptions()
    shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def release() -> None:
        lone = np.zeros((1, 1), dtype=np.int64)
        feeds = {"input_ids": lone, "attention_mask": lone + 1, "token_type_ids": lone}
        session.run(["last_hidden_state"], feeds, shrink)
        release_file(data_file(exported))

    return Runner(run, release)


def widened(rows: Ids, step: int) -> Ids:
    """Return ``rows`` right-padded with 0 to the next multiple of ``step`` columns."""
    extra = -rows.shape[1] % step
    return np.pad(rows, ((0, 0), (0, extra))) if extra else rows


_CORE: Any = None
_CORE_LOCK = threading.Lock()
_COMPILE_LOCK = threading.Lock()


def openvino_core() -> Any:
    """Return the process's one OpenVINO ``Core``, made on first use.

    OpenVINO asks for one ``Core`` an application: its plugins load once and its methods are
    thread-safe. The workers' and recall's models load in two threads at once at start-up,
    and each made a ``Core`` of its own beside the one asked for bfloat16. A topology's
    index-recall process was seen stuck in that start-up once, and a CI run's topology timed
    out waiting on a process the same way; not reproduced in ~300 starts since, alone or in a
    topology. So: one ``Core``, and one model compiled at a time (~0.3 s more start-up here).
    """
    import openvino  # ImportError where the package is not installed, every time asked

    with _CORE_LOCK:
        global _CORE
        if _CORE is None:
            _CORE = openvino.Core()
        return _CORE


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str] | None:
    """Return the CPU's feature flags as Linux lists them on x86 (None: not known here)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, flags = line.partition(":")
        if name.strip() == "flags":
            return frozenset(flags.split())
    return None  # another system, or another architecture (ARM's cpuinfo says "Features")


def cpu_may_compute_bf16(flags: frozenset[str] | None) -> bool:
    """Say whether OpenVINO might compute in bfloat16 on a CPU with ``flags`` (None: unknown,
    so it might: OpenVINO answers).

    Asking OpenVINO loads it and its CPU plugin: 71 MB and ~1.0 s alone on an AVX2 CPU,
    where the answer is no and ONNX Runtime runs the model (`memoryd up`'s start-up did not
    move: the question ran beside the imports).
    """
    return flags is None or not BF16_FLAGS.isdisjoint(flags)


@functools.cache
def openvino_bf16() -> bool:
    """Say whether OpenVINO computes in bfloat16 on this machine's CPU (asked once a process:
    the runtime's choice, each model's name and each runner's precision all ask)."""
    capabilities = openvino_core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return BF16 in capabilities


def openvino_runner(exported: Path, lanes: int = 1, threads: int = 1) -> Runner:
    """Return a runner for ``lanes`` callers at once, each batch on ``threads`` threads.

    Each lane gets an infer request of its own (a request serves one call at a time) and a
    stream of ``threads`` threads: the workers' lanes run one-thread batches side by side,
    recall's one lane runs a lone question on two threads. Threads are not pinned to cores:
    the event loop and the other lanes share them. Batches run padded to a multiple of
    ``WIDTH_STEP`` tokens; the hidden states come back at the batch's own width.
    """
    import openvino
    import openvino.properties as props
    import openvino.properties.hint as hints

    precision = openvino.Type.bf16 if openvino_bf16() else openvino.Type.f32
    config: dict[str, Any] = {
        hints.inference_precision: precision,
        props.num_streams: lanes,
        props.inference_num_threads: lanes * threads,
        hints.enable_cpu_pinning: False,
    }
    with _COMPILE_LOCK:
        compiled, weights = _compiled(exported, config)
    output = compiled.output("last_hidden_state")
    requests: queue.SimpleQueue[openvino.InferRequest] = queue.SimpleQueue()
    for _ in range(lanes):
        requests.put(compiled.create_infer_request())

    def run(ids: Ids, mask: Ids) -> Hidden:
        _ = weights  # the mapping the model computes from lives as long as this runner
        width = ids.shape[1]
        ids, mask = widened(ids, WIDTH_STEP), widened(mask, WIDTH_STEP)
        request = requests.get()  # a lane's; more callers than lanes wait for one
        try:
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            # A copy: the result is the request's own buffer, which its next call overwrites.
            return np.array(request.infer(feeds)[output][:, :width], dtype=np.float32)
        finally:
            requests.put(request)

    def release() -> None:
        # Every lane's request in hand: no batch runs while the model lets go of its buffers.
        held = [requests.get() for _ in range(lanes)]
        try:
            compiled.release_memory()
        finally:
            for request in held:
                requests.put(request)
        if weights is not None:  # the word embeddings' pages the batches read (see _Weights)
            weights.release()

    return Runner(run, release)


def _compiled(exported: Path, config: dict[str, Any]) -> tuple[Any, _Weights | None]:
    """Compile ``exported`` for the CPU, or import the compilation kept beside it; return
    the model and the mapping it was imported from, which must outlive it (None: compiled).

    The kept blob is mapped once a process, and every model made from it (the workers' and
    recall's, whose streams and threads differ) is imported from that one mapping: their
    weights are the same pages. OpenVINO's own model cache maps its blob again for each model
    it reads back, and a page mapped twice counts twice in a resident set: `memoryd up` held
    the 88 MB of weights twice (two mappings of one file, 177 MB of its RSS).

    A blob is written whole under a temporary name, then renamed: a process that maps it
    never sees half of one. Processes compile one at a time (a lock on a file in the folder),
    so the first writes the blob and the rest import it. One that cannot be imported (damaged,
    or from another build) is compiled and written again; without a folder to keep it in (a
    read-only model folder), the model is compiled each time. Writing one removes the blobs
    OpenVINO's own cache kept in the folder before and this export's blobs from another
    OpenVINO release or precision (90 MB each; a process that still maps one keeps its pages),
    and any part a writer that died left.
    """
    core = openvino_core()
    folder = exported.parent / COMPILED_FOLDER
    blob = folder / _blob_name(exported, config)
    weights = _MAPPED.get(blob)
    if weights is not None:
        model = core.import_model(weights.tensor, "CPU", config)
        weights.release()
        return model, weights
    try:
        folder.mkdir(exist_ok=True)
        lock = (folder / LOCK_FILE).open("a")
    except OSError:
        return core.compile_model(str(exported), "CPU", config), None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        weights = _mapped(blob) if blob.is_file() else None
        model = _imported(weights, config) if weights is not None else None
        if weights is None or model is None:
            weights = _compile_and_keep(exported, blob, config)
            model = core.import_model(weights.tensor, "CPU", config)
    weights.release()
    _MAPPED[blob] = weights
    return model, weights


@dataclass(frozen=True, eq=False)
class _Weights:
    """A kept blob mapped copy-on-write (a model never writes to it), as a tensor."""

    tensor: Any
    mapping: mmap.mmap
    path: Path

    def release(self) -> None:
        """Let go of the pages an import has just read, keeping the mapping.

        Importing reads the whole blob, and most of what it reads it copies: the matrix
        products' weights are laid out again for the CPU's kernels (in bfloat16 where it
        computes so). The rest (the word embeddings a Gather reads rows of) is read from the
        mapping as texts use it, and comes back a page at a time from the page cache. The
        bundled MiniLM's two models here (AVX512-BF16), having run 300 texts and 50 lone
        questions: the blob's resident pages 86 -> 27 MB, the process 399 -> 340 MB, the
        vectors equal to the bit. A page the runtime wrote to is a private copy that dropping
        would lose: then nothing is dropped (nor where the process's mappings cannot be read).
        """
        release_file(self.path)


# Each kept blob's mapping while a model imported from it lives (its runners hold it).
_MAPPED: weakref.WeakValueDictionary[Path, _Weights] = weakref.WeakValueDictionary()


def _blob_name(exported: Path, config: dict[str, Any]) -> str:
    """Name the compilation of ``exported`` at the config's precision by this OpenVINO."""
    import openvino
    import openvino.properties.hint as hints

    made_by = f"{openvino.get_version()}|{config.get(hints.inference_precision)}"
    digest = hashlib.sha256(made_by.encode()).hexdigest()[:16]
    return f"{exported.stem}-{digest}.blob"


def _another_of(stale: Path, blob: Path) -> bool:
    """Say whether ``stale`` is a blob named as ``blob`` is, for the same export, but not it."""
    export, _, digest = blob.stem.rpartition("-")
    named = re.fullmatch(rf"{re.escape(export)}-[0-9a-f]{{{len(digest)}}}\.blob", stale.name)
    return named is not None and stale != blob


def _mapped(blob: Path) -> _Weights:
    """Map the blob file."""
    import openvino

    with blob.open("rb") as file:
        mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_COPY)
    array = np.frombuffer(mapping, dtype=np.uint8)
    return _Weights(openvino.Tensor(array, shared_memory=True), mapping, blob)


def _imported(weights: _Weights, config: dict[str, Any]) -> Any | None:
    """Return the model imported from a kept blob (None: damaged, or not this build's)."""
    try:
        return openvino_core().import_model(weights.tensor, "CPU", config)
    except RuntimeError:
        return None


def _compile_and_keep(exported: Path, blob: Path, config: dict[str, Any]) -> _Weights:
    """Compile the export, write the blob whole (then rename it), and return its mapping."""
    compiled = openvino_core().compile_model(str(exported), "CPU", config)
    written = blob.with_name(f"{blob.name}.{os.getpid()}.part")
    with written.open("wb") as out:
        out.write(compiled.export_model().getbuffer())
    del compiled  # its weights, unmapped: the models import the blob's
    written.replace(blob)
    for stale in blob.parent.glob("*.blob*"):
        # OpenVINO's own cache named its blobs by a number; a part left is a writer's that
        # died (only the lock's holder writes one); another blob of this export is another
        # OpenVINO release's or precision's, which this machine no longer reads.
        if stale.stem.isdigit() or stale.suffix == ".part" or _another_of(stale, blob):
            stale.unlink(missing_ok=True)
    return _mapped(blob)


def runner(engine: Engine, exported: Path, lanes: int, threads: int) -> Runner:
    """Return ``engine``'s runner of ``exported`` for ``lanes`` callers of ``threads`` threads."""
    if engine == "openvino":
        return openvino_runner(exported, lanes, threads)
    return onnxruntime_runner(exported, threads)
