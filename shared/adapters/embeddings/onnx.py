"""A sentence-transformers model run from its ONNX export: OpenVINO or ONNX Runtime, not torch.

The model's transformer is exported to ONNX once (``onnx_export``, in a child process) and
cached; this process only loads the engine (``runners``: OpenVINO or ONNX Runtime) and the
model's fast tokenizer, so it starts in a fraction of a second and holds far less memory than
torch. Pooling is the model's mean over tokens, as sentence-transformers computes it; ``int8``
runs the quantised export (ONNX Runtime). OpenVINO computes in bfloat16 where the CPU can:
those vectors have a name of their own (``-bf16``), as the int8 export's do.

A call's texts are cut into length-sorted batches, and ``threads`` batches run at once, each on
one thread (``lanes``), rather than one batch at a time split over ``threads`` threads. ONNX
Runtime's threads of one batch wait for each other at every operator: when anything else in
the process (the event loop, another worker) takes a core, the whole batch waits for the
thread that lost it. Measured on two cores, int8 MiniLM, 256 texts a call: alone, two lanes
465 texts/s against 456 for two threads a batch (one thread: 269); beside a process that
keeps one core busy, two lanes 299 against 218 (one thread: 265). The vectors are the same to
the bit: a batch's numbers do not depend on how many threads compute it.

Batches are small (``BATCH_TOKENS``, 512 tokens, padding included): a batch of similar lengths
pads less, its activations stay in the core's cache, and a call's many batches share the lanes
evenly. Measured on two cores, fp32, the keys of 1,500 LongMemEval turns in calls of 620 texts
(the keys of a pulled batch of 256 turns): 4,096 tokens a batch 114-154 texts/s, 512 tokens
163-179, 128-256 the same as 512. The vectors are the same to the bit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import structlog

from memoryd.shared.adapters.pages import trim_heap
from memoryd.shared.tasks import outcome_read

from ._vectors import empty_rows, unit_rows
from .local import MINILM_DIMENSION, MINILM_NAME, bundled_minilm_path
from .onnx_export import ensure_export
from .port import EmbeddingDimensionError, EmbeddingError, Vectors
from .runners import Engine, Runner, openvino_bf16, runner

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = structlog.get_logger(__name__)

INT8_SUFFIX = "-int8"
BF16_SUFFIX = "-bf16"
BATCH_TOKENS = 512  # tokens in one model run, padding included (see above)


def default_model_cache() -> Path:
    """Return where exported models are kept: ``$XDG_CACHE_HOME/memoryd/models``."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "memoryd" / "models"


def mean_pool(hidden: npt.NDArray[np.float32], mask: npt.NDArray[np.int64]) -> Vectors:
    """Average each row's token vectors over its real (unpadded) tokens."""
    weights = mask[..., None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    pooled: Vectors = (summed / counts).astype(np.float32)
    return pooled


def token_batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group positions, shortest first, so no batch pads to more than ``max_tokens`` tokens.

    Similar lengths share a batch (little padding), and a batch of long texts holds fewer
    of them: the attention buffers, which grow with batch x length squared, stay bounded.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    for position in order:
        longest = lengths[position]  # the longest so far: the order is ascending
        if batches and (len(batches[-1]) + 1) * longest <= max_tokens:
            batches[-1].append(position)
        else:
            batches.append([position])
    return batches


def lowered(nice: int) -> None:
    """Raise the calling thread's scheduling niceness by ``nice`` (Linux: per thread; where the
    platform cannot, nothing changes)."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def padded(rows: Sequence[Sequence[int]]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Return token ids right-padded with 0 to the longest row, and the attention mask."""
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for n, row in enumerate(rows):
        ids[n, : len(row)] = row
        mask[n, : len(row)] = 1
    return ids, mask


class OnnxEmbedder:
    """Embed texts with an exported sentence-transformers model, loaded on first use."""

    def __init__(  # noqa: PLR0913 (the model and how it runs, keyword-only)
        self,
        model: str | Path | None = None,
        *,
        int8: bool = False,
        threads: int | None = None,
        batch_threads: int = 1,
        batch_tokens: int = BATCH_TOKENS,
        cache_dir: Path | None = None,
        max_tokens: int | None = None,
        engine: Engine = "onnxruntime",
        nice: int = 0,
        idle_seconds: float | None = None,
        unload_seconds: float | None = None,
    ) -> None:
        """Use the bundled MiniLM or the model folder ``model``; ``threads`` lanes per call.

        A model call gets at most ``batch_tokens`` tokens, padding included; a text is cut
        at the model's own limit, or at ``max_tokens`` if that is lower. ``batch_threads``
        threads compute one batch (see ``runners``): 1 for the workers' lanes; recall's
        lone queries wait less on 2. ``engine`` runs the export; int8 runs on ONNX Runtime.
        ``nice`` > 0 runs every batch in the lanes at that scheduling niceness (Linux, ONNX
        Runtime; see ``lowered``): the threads that share the cores with them go first.
        ``idle_seconds``: once no text has come for that long, the engine gives back its
        working memory and the C heap its free pages (``release_when_idle``; None: never).
        ``unload_seconds``: once none has come for that long, the model itself is let go of
        (``unload_when_idle``; None: never); the next text loads it again.
        """
        if int8 and engine != "onnxruntime":
            raise ValueError("the int8 export runs on ONNX Runtime (engine='onnxruntime')")
        self._model_dir = Path(model) if model is not None else None
        self._base_name = MINILM_NAME if model is None else Path(model).name
        self._engine = engine
        self._model_name: str | None = None  # named on first use: bf16 depends on the CPU
        self._dimension: int | None = MINILM_DIMENSION if model is None else None
        self._int8 = int8
        self._threads = threads
        # ONNX Runtime computes a lane's batch on the lane's own thread; OpenVINO on threads
        # of its own, which a lane's niceness would not reach.
        self._nice = nice if engine == "onnxruntime" else 0
        self._batch_threads = batch_threads
        self._max_tokens = max_tokens
        self.batch_tokens = batch_tokens
        self._cache_dir = cache_dir or default_model_cache()
        self._lock = threading.Lock()  # the first calls race to load; one loads
        self._runner: Runner | None = None
        self._tokenizer: Tokenizer | None = None
        self._lanes: ThreadPoolExecutor | None = None
        for name, seconds in (("idle_seconds", idle_seconds), ("unload_seconds", unload_seconds)):
            if seconds is not None and seconds <= 0:
                raise ValueError(f"{name} must be positive, got {seconds}")
        # What an idle model does, and after how long without a text, soonest first.
        steps = ((idle_seconds, self.release_when_idle), (unload_seconds, self.unload_when_idle))
        self._idle_steps: list[tuple[float, Callable[[], None]]] = sorted(
            ((seconds, step) for seconds, step in steps if seconds is not None),
            key=lambda timed: timed[0],
        )
        self._steps_taken = 0  # of ``_idle_steps``, since the last text
        self._last_used = 0.0  # time.monotonic() of the last embed's end
        self._embedding = 0  # embed calls under way
        self._checking: asyncio.AbstractEventLoop | None = None  # where a check is scheduled
        self._releasing: asyncio.Future[None] | None = None  # held: a loop keeps tasks weakly
        self.releases = 0  # times the working memory was given back (for tests and figures)
        self.unloads = 0  # times the model was let go of

    @property
    def model_name(self) -> str:
        """Name the model as cache keys record it: the int8 export's vectors and bfloat16's
        (OpenVINO on a CPU that has it) are another model's."""
        if self._model_name is None:
            if self._engine != "openvino":
                self._model_name = self._base_name + (INT8_SUFFIX if self._int8 else "")
            else:
                try:
                    bf16 = openvino_bf16()
                except ImportError:  # it cannot load either: the load's error says why
                    return self._base_name
                self._model_name = self._base_name + (BF16_SUFFIX if bf16 else "")
        return self._model_name

    @property
    def loaded(self) -> bool:
        """Say whether the model is in memory (it loads on the first embed)."""
        return self._runner is not None

    @property
    def dimension(self) -> int:
        """Return the vector width; loads the model (blocking) if it was not given."""
        if self._dimension is None:
            self._ensure_loaded()
        assert self._dimension is not None
        return self._dimension

    async def embed(self, texts: Sequence[str]) -> Vectors:
        """Encode ``texts`` in a worker thread so the event loop keeps serving."""
        if not texts:
            return empty_rows(self.dimension)
        self._embedding += 1
        try:
            vectors = await asyncio.to_thread(self._encode, list(texts))
        finally:
            self._embedding -= 1
            self._used()
        return unit_rows(vectors, self.dimension, source=self.model_name)

    def _used(self) -> None:
        """Note the model's use; check for idleness when the first idle step is due (one check
        at a time, on the loop of the last call)."""
        if not self._idle_steps:
            return
        self._last_used = time.monotonic()
        self._steps_taken = 0
        loop = asyncio.get_running_loop()
        if self._checking is not loop:
            self._checking = loop
            loop.call_later(self._idle_steps[0][0], self._idle_check, loop)

    def _idle_check(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take the next idle step once the model has been idle that long (until then, check
        again when it could have been), and check for the step after it."""
        if self._checking is not loop:
            return  # a call on another loop scheduled its own check
        due, step = self._idle_steps[self._steps_taken]
        idle = time.monotonic() - self._last_used
        if self._embedding or idle < due:
            loop.call_later(max(due - idle, due / 10), self._idle_check, loop)
            return
        self._steps_taken += 1
        if self._steps_taken < len(self._idle_steps):
            loop.call_later(self._idle_steps[self._steps_taken][0] - idle, self._idle_check, loop)
        else:
            self._checking = None
        self._releasing = asyncio.ensure_future(asyncio.to_thread(step))
        self._releasing.add_done_callback(outcome_read)

    def release_when_idle(self) -> None:
        """Give back what the engine keeps between batches, then the C heap's free pages.

        After ingest stops, OpenVINO keeps the buffers of every batch shape it ran: the
        workers' model having embedded the keys of 1,000 LongMemEval turns held 495-569 MB,
        369-381 once given back (this 2-core machine, bfloat16), and the next batches ran as
        fast (289-295 against 286-294 texts/s). A batch waits while the engine lets go (0.1
        ms); the trim takes 10-18 ms and holds each malloc arena's lock meanwhile.
        """
        with self._lock:
            model = self._runner
        if model is None:
            return
        model.release()
        trim_heap()
        self.releases += 1
        log.debug("embedding_model_released", model=self.model_name)

    def unload_when_idle(self) -> None:
        """Let go of the model (its weights as the engine laid them out, its working memory),
        then the C heap's free pages; the next text loads it again.

        The workers' model, OpenVINO in bfloat16 on AVX512-BF16, having run the keys of 1,000
        turns: the process 266 -> 200 MB once it had given back its working memory, then let
        go of; loading it again (imported from the compiled blob recall's model keeps mapped)
        and its first batch of 64 texts took 0.31 s.
        """
        with self._lock:
            model, self._runner = self._runner, None
        if model is None:
            return
        del model  # a batch under way holds its own reference; the last one frees the model
        trim_heap()
        self.unloads += 1
        log.debug("embedding_model_unloaded", model=self.model_name)

    def _encode(self, texts: list[str]) -> Vectors:
        model, tokenizer = self._ensure_loaded()
        tokens = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
        batches = token_batches([len(row) for row in tokens], self.batch_tokens)

        def run(batch: list[int]) -> Vectors:
            return _run(model, [tokens[i] for i in batch])

        lanes = self._lanes
        # One batch (a query, a few turns) runs here, unless the lanes run at a lower priority
        # than this thread: handing it to a lane only adds a wait.
        results: Iterator[Vectors]
        if lanes is None or (len(batches) == 1 and not self._nice):
            results = map(run, batches)
        else:
            results = lanes.map(run, batches)
        rows: list[Vectors | None] = [None] * len(texts)
        for batch, vectors in zip(batches, results, strict=True):
            for position, vector in zip(batch, vectors, strict=True):
                rows[position] = vector
        return np.stack(rows)  # type: ignore[arg-type]

    def _ensure_loaded(self) -> tuple[Runner, Tokenizer]:
        with self._lock:
            if self._runner is None or self._tokenizer is None:
                lanes = self._threads or os.cpu_count() or 1
                self._runner, self._tokenizer = self._load(lanes)
                if self._lanes is None and (lanes > 1 or self._nice):  # kept over unloads
                    self._lanes = ThreadPoolExecutor(
                        lanes,
                        thread_name_prefix="memoryd-model",
                        initializer=lowered,
                        initargs=(self._nice,),
                    )
            return self._runner, self._tokenizer

    def _load(self, lanes: int) -> tuple[Runner, Tokenizer]:
        started = time.perf_counter()
        source = self._model_dir or bundled_minilm_path()
        _check_mean_pooling(source)
        exported = ensure_export(source, self._cache_dir, self._base_name, int8=self._int8)
        model = runner(self._engine, exported, lanes, self._batch_threads)
        tokenizer = _tokenizer(source, self._max_tokens)
        width = _width(model, tokenizer)
        if self._dimension is not None and width != self._dimension:
            raise EmbeddingDimensionError(
                f"{source} makes {width}-dimensional vectors; configured for {self._dimension}"
            )
        self._dimension = width
        # Debug: a load may finish while a start that failed for another reason exits (start-up
        # loads the models beside NATS and SQL); `memoryd up` says `embedding_model_ready`.
        log.debug(
            "embedding_model_loaded",
            model=self.model_name,
            runtime=self._engine,
            source=str(exported),
            dimension=width,
            seconds=round(time.perf_counter() - started, 2),
        )
        return model, tokenizer


def _tokenizer(model_dir: Path, max_tokens: int | None) -> Tokenizer:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    limit = _max_tokens(model_dir)
    tokenizer.enable_truncation(limit if max_tokens is None else min(limit, max_tokens))
    tokenizer.no_padding()  # tokenizer.json may set padding; batches pad themselves
    return tokenizer


def _run(model: Runner, rows: Sequence[Sequence[int]]) -> Vectors:
    ids, mask = padded(rows)
    return mean_pool(model(ids, mask), mask)


def _width(model: Runner, tokenizer: Tokenizer) -> int:
    return int(_run(model, [tokenizer.encode("width").ids]).shape[1])


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _max_tokens(model_dir: Path) -> int:
    config = _read_json(model_dir / "sentence_bert_config.json")
    return int(config.get("max_seq_length", 256))


def _check_mean_pooling(model_dir: Path) -> None:
    pooling = _read_json(model_dir / "1_Pooling" / "config.json")
    if pooling and not pooling.get("pooling_mode_mean_tokens", False):
        raise EmbeddingError(
            f"{model_dir} does not pool by mean: run it with MEMORYD_EMBEDDING_RUNTIME=torch"
        )
