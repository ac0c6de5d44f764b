"""OnnxEmbedder on the real bundled all-MiniLM-L6-v2, against the torch model it replaces."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from structlog.testing import capture_logs

from memoryd.shared.adapters.embeddings import (
    EmbeddingError,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    bundled_minilm_path,
)
from memoryd.shared.adapters.embeddings.local import MINILM_NAME
from memoryd.shared.adapters.embeddings.onnx import default_model_cache, padded, token_batches
from memoryd.shared.adapters.embeddings.onnx_export import (
    EXTERNAL_BYTES,
    data_file,
    ensure_export,
    export_name,
    externalise,
)
from memoryd.shared.adapters.embeddings.runners import Engine, onnxruntime_runner, openvino_bf16
from memoryd.shared.adapters.pages import areas
from tests.proc import anonymous_kb

pytestmark = pytest.mark.model

TEXTS = [
    "I adopted a greyhound last month.",
    "where do I live?",
    "Yes, twice a week.",
    "My sister works as a nurse in Lisbon and I visit her every summer. " * 3,
    "Stocks fell sharply today after the quarterly figures came out.",
    # Longer than the model's 256 tokens: both runtimes truncate at the same place.
    "We talked about the budget for the trip to Kyoto, the hotel and the train. " * 30,
    "",
]


@pytest.fixture(scope="module")
def torch_minilm() -> SentenceTransformerEmbedder:
    """The torch model the ONNX runtime must agree with."""
    return SentenceTransformerEmbedder(batch_size=64)


@pytest.fixture(scope="module")
def onnx_minilm() -> OnnxEmbedder:
    """The fp32 export, from the machine's model cache (exported on first use)."""
    return OnnxEmbedder()


async def test_onnx_vectors_equal_the_torch_vectors(
    onnx_minilm: OnnxEmbedder, torch_minilm: SentenceTransformerEmbedder
) -> None:
    """The default runtime is a drop-in: same model name, vectors equal to 1e-5."""
    onnx_vectors = await onnx_minilm.embed(TEXTS)
    torch_vectors = await torch_minilm.embed(TEXTS)

    assert torch_minilm.model_name == onnx_minilm.model_name  # one cache, one index
    np.testing.assert_allclose(torch_vectors, onnx_vectors, atol=1e-5)


async def test_a_query_cap_cuts_long_texts_alike_in_both_runtimes_and_leaves_short_ones(
    onnx_minilm: OnnxEmbedder, torch_minilm: SentenceTransformerEmbedder
) -> None:
    """``max_tokens`` (recall's ``query_max_tokens``): a pasted page is embedded from its first
    128 tokens, the same in both runtimes; a question under the cap gets its usual vector."""
    capped_onnx = OnnxEmbedder(max_tokens=128)
    capped_torch = SentenceTransformerEmbedder(max_tokens=128)
    page, question = TEXTS[5], TEXTS[1]  # ~480 tokens; 6 tokens

    cut = await capped_onnx.embed([page, question])
    whole = await onnx_minilm.embed([page, question])

    np.testing.assert_allclose(await capped_torch.embed([page, question]), cut, atol=1e-5)
    np.testing.assert_array_equal(whole[1], cut[1])
    assert float(whole[0] @ cut[0]) < 0.999  # the page's vector changed: it was cut


async def test_a_batch_equals_the_texts_one_by_one(onnx_minilm: OnnxEmbedder) -> None:
    """Length-sorted batches with padding give each text the vector it gets alone."""
    texts = [f"Turn {i}: we talked about it." + " More detail." * (i % 9) for i in range(70)]

    batched = await onnx_minilm.embed(texts)
    one_by_one = np.concatenate([await onnx_minilm.embed([text]) for text in texts])

    np.testing.assert_allclose(one_by_one, batched, atol=1e-5)


async def test_batches_run_on_several_lanes_give_the_vectors_of_one(
    onnx_minilm: OnnxEmbedder,
) -> None:
    """A call cut into many batches, run two at a time, gives every text its own vector."""
    texts = [f"Turn {i}: we talked about it." + " More detail." * (i % 13) for i in range(90)]
    lanes = OnnxEmbedder(threads=2, batch_tokens=256)

    one_lane = await OnnxEmbedder(threads=1, batch_tokens=256).embed(texts)

    np.testing.assert_array_equal(one_lane, await lanes.embed(texts))
    np.testing.assert_allclose(await onnx_minilm.embed(texts), one_lane, atol=1e-5)


async def test_a_query_computed_on_two_threads_has_the_vector_of_one() -> None:
    """Recall's query model runs a batch on two threads: its vectors are those of one thread."""
    queries = ["What did I say about my greyhound?", "When is the dentist?", "hi"]
    one_thread = OnnxEmbedder(threads=1, max_tokens=128)
    two_threads = OnnxEmbedder(threads=1, batch_threads=2, max_tokens=128)

    for query in queries:  # one at a time, as a lone recall asks
        np.testing.assert_array_equal(
            await one_thread.embed([query]), await two_threads.embed([query])
        )
    np.testing.assert_array_equal(await one_thread.embed(queries), await two_threads.embed(queries))


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="per-thread niceness is Linux's")
async def test_lanes_at_a_lower_priority_run_every_batch_and_keep_the_vectors(
    onnx_minilm: OnnxEmbedder,
) -> None:
    """With ``nice`` the batches run in the lanes, at that much lower priority than the
    caller's thread, which keeps its own; the vectors are the model's."""
    texts = ["I adopted a greyhound last month.", "hi"]
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    lowered = OnnxEmbedder(threads=1, nice=5)

    vectors = await lowered.embed(texts)

    lanes = [t for t in threading.enumerate() if t.name.startswith("memoryd-model")]
    niceness = {os.getpriority(os.PRIO_PROCESS, t.native_id) for t in lanes if t.native_id}
    assert caller + 5 in niceness
    assert caller == os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    np.testing.assert_allclose(await onnx_minilm.embed(texts), vectors, atol=1e-5)


async def test_the_int8_export_is_another_model_close_to_the_original(
    torch_minilm: SentenceTransformerEmbedder,
) -> None:
    """int8 has its own name (its vectors differ) and stays within ~0.99 cosine on average."""
    quantised = OnnxEmbedder(int8=True)
    texts = [text for text in TEXTS if text]

    cosines = np.sum(await quantised.embed(texts) * await torch_minilm.embed(texts), axis=1)

    assert "all-MiniLM-L6-v2-int8" == quantised.model_name
    assert float(cosines.mean()) >= 0.98
    assert float(cosines.min()) >= 0.9


async def test_openvino_vectors_are_within_ten_thousandths_of_a_cosine_of_torchs(
    torch_minilm: SentenceTransformerEmbedder,
) -> None:
    """OpenVINO: bfloat16 on a CPU that has it (a name of its own), fp32 elsewhere;
    either way every vector within 0.9998 cosine of torch's (the int8 export's: 0.9 at worst)."""
    openvino = OnnxEmbedder(engine="openvino")
    texts = [text for text in TEXTS if text]

    cosines = np.sum(await openvino.embed(texts) * await torch_minilm.embed(texts), axis=1)

    expected = "all-MiniLM-L6-v2-bf16" if openvino_bf16() else "all-MiniLM-L6-v2"
    assert expected == openvino.model_name
    assert float(cosines.min()) >= 0.9998


async def test_openvino_lanes_agree_to_the_bit_and_a_batch_keeps_each_texts_vector() -> None:
    """Two lanes (each its own infer request) give one lane's vectors to the bit; a text alone
    gets its vector in a padded batch to 0.99999 cosine (bfloat16 sums in another order)."""
    texts = [f"Turn {i}: we talked about it." + " More detail." * (i % 13) for i in range(90)]
    one_lane = OnnxEmbedder(engine="openvino", threads=1, batch_tokens=256)
    two_lanes = OnnxEmbedder(engine="openvino", threads=2, batch_tokens=256)

    batched = await one_lane.embed(texts)

    np.testing.assert_array_equal(batched, await two_lanes.embed(texts))
    alone = np.concatenate([await one_lane.embed([text]) for text in texts[:20]])
    assert float(np.sum(alone * batched[:20], axis=1).min()) >= 0.99999


async def test_an_openvino_query_on_two_threads_is_close_to_one_threads() -> None:
    """Recall's query model runs a lone question on two threads."""
    queries = ["What did I say about my greyhound?", "When is the dentist?", "hi"]
    one_thread = OnnxEmbedder(engine="openvino", threads=1, max_tokens=128)
    two_threads = OnnxEmbedder(engine="openvino", threads=1, batch_threads=2, max_tokens=128)

    for query in queries:
        np.testing.assert_allclose(
            await one_thread.embed([query]), await two_threads.embed([query]), atol=1e-6
        )


async def test_the_export_is_made_once_and_found_by_the_next_process() -> None:
    """A second embedder on the same cache loads the exported file without exporting again."""
    first = OnnxEmbedder(cache_dir=default_model_cache())
    await first.embed(["warm"])
    # The cache may also hold exports made another way (an earlier version's): not this one's.
    exported = default_model_cache() / export_name(bundled_minilm_path(), MINILM_NAME, int8=False)
    stamp = exported.stat().st_mtime_ns

    second = OnnxEmbedder(cache_dir=default_model_cache())
    with capture_logs() as logs:
        await second.embed(["again"])

    assert stamp == exported.stat().st_mtime_ns
    loaded = [entry for entry in logs if entry["event"] == "embedding_model_loaded"]
    assert [str(exported)] == [entry["source"] for entry in loaded]


def test_the_export_keeps_its_weights_in_a_data_file_that_onnx_runtime_maps() -> None:
    """The export's graph names its weights in a data file beside it, and ONNX Runtime maps
    them from there instead of copying them into each session: a process holding the workers'
    and recall's sessions reads the word embeddings from the file's pages."""
    exported = ensure_export(bundled_minilm_path(), default_model_cache(), MINILM_NAME, int8=False)
    workers, recall = onnxruntime_runner(exported, 1), onnxruntime_runner(exported, 2)
    ids = np.array([[101, 1045, 4233, 1037, 5001, 102]])

    np.testing.assert_array_equal(workers(ids, np.ones_like(ids)), recall(ids, np.ones_like(ids)))
    assert 1 <= _mappings_of(data_file(exported))
    assert exported.stat().st_size < 1_000_000 < data_file(exported).stat().st_size


def test_externalising_moves_the_large_weights_to_aligned_offsets_and_keeps_the_results(
    tmp_path: Path,
) -> None:
    """A weight of ``EXTERNAL_BYTES`` or more goes to the data file at an offset a multiple of
    it; a small one stays in the graph; the model computes the same numbers to the bit."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    large = [rng.standard_normal((128, 128)).astype(np.float32) for _ in range(2)]  # 64 KiB
    bias = rng.standard_normal(128).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["h"]),
        helper.make_node("MatMul", ["h", "w1"], ["hh"]),
        helper.make_node("Add", ["hh", "b"], ["y"]),
    ]
    weights = [numpy_helper.from_array(w, f"w{n}") for n, w in enumerate(large)]
    graph = helper.make_graph(
        nodes,
        "two-products",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 128])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 128])],
        [*weights, numpy_helper.from_array(bias, "b")],
    )
    inline = tmp_path / "inline.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), inline)
    external = tmp_path / "external.onnx"

    externalise(inline, external)

    saved = {
        tensor.name: tensor
        for tensor in onnx.load(external, load_external_data=False).graph.initializer
    }
    places = {
        name: {entry.key: entry.value for entry in tensor.external_data}
        for name, tensor in saved.items()
        if tensor.data_location == TensorProto.EXTERNAL
    }
    assert {"w0", "w1"} == set(places)
    assert all(0 == int(place["offset"]) % EXTERNAL_BYTES for place in places.values())
    data = data_file(external).read_bytes()
    for n, w in enumerate(large):
        place = places[f"w{n}"]
        start = int(place["offset"])
        assert w.tobytes() == data[start : start + int(place["length"])]
    x = {"x": rng.standard_normal((1, 128)).astype(np.float32)}
    results = [
        onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, x)
        for model in (inline, external)
    ]
    np.testing.assert_array_equal(results[0][0], results[1][0])


def _export_copied(into: Path) -> Path:
    """Copy the machine's fp32 export (made already) into a model folder of the test's own."""
    name = export_name(bundled_minilm_path(), MINILM_NAME, int8=False)
    into.mkdir(exist_ok=True)
    shutil.copy(default_model_cache() / name, into / name)
    shutil.copy(data_file(default_model_cache() / name), data_file(into / name))
    return into / name


async def test_openvino_reads_back_the_model_it_compiled_and_computes_the_same_vectors(
    tmp_path: Path,
) -> None:
    """The first load compiles and keeps the compiled model beside the export; the next reads
    it back (left as it was) and gives the same vectors to the bit; a damaged one is compiled
    again; a folder where none can be kept still loads."""
    await OnnxEmbedder(cache_dir=default_model_cache()).embed(["exported on first use"])
    _export_copied(tmp_path / "models")
    queries = ["What did I say about my greyhound?", "When is the dentist?"]
    vectors = await OnnxEmbedder(engine="openvino", cache_dir=tmp_path / "models").embed(queries)
    [blob] = (tmp_path / "models" / "openvino").glob("*.blob")
    stamp = blob.stat().st_mtime_ns

    again = await OnnxEmbedder(engine="openvino", cache_dir=tmp_path / "models").embed(queries)

    np.testing.assert_array_equal(vectors, again)
    assert stamp == blob.stat().st_mtime_ns
    blob.write_bytes(blob.read_bytes()[:100_000])
    damaged = await OnnxEmbedder(engine="openvino", cache_dir=tmp_path / "models").embed(queries)
    np.testing.assert_array_equal(vectors, damaged)
    _export_copied(tmp_path / "kept-nowhere")
    (tmp_path / "kept-nowhere" / "openvino").write_text("a file where the folder would be")
    nowhere = OnnxEmbedder(engine="openvino", cache_dir=tmp_path / "kept-nowhere")
    np.testing.assert_array_equal(vectors, await nowhere.embed(queries))


def _mappings_of(path: Path) -> int:
    """Return how many of this process's memory mappings are of ``path``.

    The kernel may split one mapping into several areas (an fp32 import leaves 73, each page
    the runtime wrote apart); an area that starts where the one before ended, at the file
    offset that follows on, is the same mapping.
    """
    mappings, follows = 0, None
    for line in Path("/proc/self/maps").read_text().splitlines():
        if not line.endswith(str(path)):
            continue
        span, _, offset = line.split()[:3]
        start, end = (int(bound, 16) for bound in span.split("-"))
        if (start, int(offset, 16)) != follows:
            mappings += 1
        follows = (end, int(offset, 16) + end - start)
    return mappings


async def test_the_workers_and_recalls_models_share_one_mapping_of_the_compiled_model(
    tmp_path: Path,
) -> None:
    """Two models of one export (a worker's lanes, recall's lone question) read the kept
    compiled model through one mapping: its weights count once in the process's memory. The
    blob OpenVINO's own model cache kept before is removed, so is a part a writer left and the
    export's blob from an older OpenVINO release; another export's blob stays."""
    await OnnxEmbedder(cache_dir=default_model_cache()).embed(["exported on first use"])
    export = _export_copied(tmp_path)
    (tmp_path / "openvino").mkdir()
    (tmp_path / "openvino" / "16145458768083273439.blob").write_bytes(b"OpenVINO's cache kept")
    (tmp_path / "openvino" / "a.blob.4242.part").write_bytes(b"a writer that died left")
    older = tmp_path / "openvino" / f"{export.stem}-0123456789abcdef.blob"
    older.write_bytes(b"an older OpenVINO release compiled this export")
    other = tmp_path / "openvino" / "another-model-0123456789abcdef.blob"
    other.write_bytes(b"another export's")
    await OnnxEmbedder(engine="openvino", cache_dir=tmp_path).embed(["compiled and kept"])
    workers = OnnxEmbedder(engine="openvino", cache_dir=tmp_path, threads=2, batch_threads=1)
    queries = OnnxEmbedder(engine="openvino", cache_dir=tmp_path, threads=1, batch_threads=2)

    await workers.embed(["a turn to index"])
    await queries.embed(["What did I say about my greyhound?"])

    [blob] = set((tmp_path / "openvino").glob("*.blob*")) - {other}
    assert 1 == _mappings_of(blob)
    assert other.exists()


def _resident_kb(path: Path) -> int:
    """Return how many kB of ``path`` this process's mappings hold resident."""
    return sum(area.rss_kb for area in areas() or () if area.path == str(path))


async def test_the_models_let_go_of_the_compiled_pages_they_copied(tmp_path: Path) -> None:
    """Importing reads the whole compiled model and copies most of it: those pages are let
    go of, the rest read again as texts use it. After both models ran, under half the blob is
    resident, and they compute what a model compiled in memory (no blob) computes."""
    await OnnxEmbedder(cache_dir=default_model_cache()).embed(["exported on first use"])
    _export_copied(tmp_path / "kept")
    texts = [f"Turn {i}: we planned the trip to Kyoto." + " More." * (i % 9) for i in range(40)]
    workers = OnnxEmbedder(engine="openvino", cache_dir=tmp_path / "kept", threads=2)
    queries = OnnxEmbedder(engine="openvino", cache_dir=tmp_path / "kept", batch_threads=2)
    _export_copied(tmp_path / "nowhere")
    (tmp_path / "nowhere" / "openvino").write_text("a file where the folder would be")
    compiled = OnnxEmbedder(engine="openvino", cache_dir=tmp_path / "nowhere", threads=2)

    batch, question = await workers.embed(texts), await queries.embed(texts[:1])

    [blob] = (tmp_path / "kept" / "openvino").glob("*.blob")
    assert _resident_kb(blob) * 1024 < blob.stat().st_size / 2
    np.testing.assert_array_equal(await compiled.embed(texts), batch)
    np.testing.assert_array_equal(
        await OnnxEmbedder(
            engine="openvino", cache_dir=tmp_path / "nowhere", batch_threads=2
        ).embed(texts[:1]),
        question,
    )


LOAD_AND_EMBED = """
import asyncio, sys
from pathlib import Path
from memoryd.shared.adapters.embeddings import OnnxEmbedder
embedder = OnnxEmbedder(engine="openvino", cache_dir=Path(sys.argv[1]))
vectors = asyncio.run(embedder.embed(["What did I say about my greyhound?"]))
print(vectors.tobytes().hex())  # the last line: the log writes to stdout too
"""


def test_processes_starting_at_once_share_one_compiled_model(tmp_path: Path) -> None:
    """Three processes load on one fresh model folder at once (a topology's first start):
    each loads, with the same vector, and one compiled model is kept."""
    _export_copied(tmp_path)
    starts = [
        subprocess.Popen(
            [sys.executable, "-c", LOAD_AND_EMBED, str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [start.communicate(timeout=120)[0].splitlines()[-1] for start in starts]

    assert [0, 0, 0] == [start.returncode for start in starts]
    assert 1 == len(set(outputs))
    assert 1 == len(list((tmp_path / "openvino").glob("*.blob")))


async def test_concurrent_first_calls_load_the_model_once() -> None:
    """Calls racing on a fresh embedder share one load."""
    embedder = OnnxEmbedder()

    with capture_logs() as logs:
        results = await asyncio.gather(*(embedder.embed([f"text {i}"]) for i in range(4)))

    assert 1 == sum(entry["event"] == "embedding_model_loaded" for entry in logs)
    assert [(1, 384)] * 4 == [result.shape for result in results]


async def test_a_model_that_does_not_pool_by_mean_is_refused(tmp_path: Path) -> None:
    """A CLS-pooling model would get wrong vectors here: refused, naming the torch runtime."""
    folder = tmp_path / "cls-model"
    shutil.copytree(bundled_minilm_path(), folder)
    pooling = folder / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text())
    config |= {"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}
    pooling.write_text(json.dumps(config))

    with pytest.raises(EmbeddingError, match="MEMORYD_EMBEDDING_RUNTIME=torch"):
        await OnnxEmbedder(folder, cache_dir=tmp_path / "cache").embed(["anything"])


def test_token_batches_cover_every_text_once_within_the_budget() -> None:
    """Shortest first; a batch never pads past the budget; long texts go in small batches."""
    lengths = [3, 1, 2, 4, 1, 8, 8]

    batches = token_batches(lengths, max_tokens=8)

    assert [[1, 4, 2], [0, 3], [5], [6]] == batches
    assert all(len(b) * max(lengths[i] for i in b) <= 8 for b in batches)


def test_padded_rows_and_their_mask() -> None:
    """Rows are right-padded with 0 to the longest; the mask marks the real tokens."""
    ids, mask = padded([[5, 6, 7], [9]])

    assert [[5, 6, 7], [9, 0, 0]] == ids.tolist()
    assert [[1, 1, 1], [1, 0, 0]] == mask.tolist()


async def _released(model: OnnxEmbedder, times: int, *, unloads: bool = False) -> None:
    """Wait (10 s at most) until the model has given its working memory back ``times`` times,
    or with ``unloads`` been let go of that many times."""
    deadline = asyncio.get_running_loop().time() + 10.0
    while (model.unloads if unloads else model.releases) < times:
        assert asyncio.get_running_loop().time() < deadline, "the idle model held on"
        await asyncio.sleep(0.05)


@pytest.mark.skipif(sys.platform != "linux", reason="Linux's /proc/self/status")
async def test_an_idle_openvino_model_gives_back_its_working_memory_and_keeps_its_vectors() -> None:
    """Once no text has come for ``idle_seconds``, OpenVINO lets go of the buffers of the batch
    shapes it ran and the heap of its free pages: the process holds less, and the next calls
    get the same vectors to the bit. While texts keep coming, it holds on."""
    texts = [
        f"Turn {i}: we planned the trip to Kyoto, " + "then more. " * (i % 60) for i in range(400)
    ]
    model = OnnxEmbedder(engine="openvino", threads=2, idle_seconds=0.5)
    before = await model.embed(texts)
    for _ in range(8):  # in use: a text every 0.1 s
        await model.embed(texts[:1])
        await asyncio.sleep(0.1)
    assert 0 == model.releases
    held = anonymous_kb()
    stem = Path(export_name(bundled_minilm_path(), MINILM_NAME, int8=False)).stem
    blob = next(a.path for a in areas() or () if Path(a.path).name.startswith(f"{stem}-"))
    assert _resident_kb(Path(blob)) > 8_000  # the word embeddings' rows the texts read

    await _released(model, 1)

    assert anonymous_kb() < held - 16_000
    assert _resident_kb(Path(blob)) < 1_000
    np.testing.assert_array_equal(before, await model.embed(texts))
    await _released(model, 2)


def _words_across_the_vocabulary() -> list[str]:
    """Texts of words spread over the model's whole vocabulary (its embeddings' every page)."""
    vocabulary = (bundled_minilm_path() / "vocab.txt").read_text().split()
    words = [word for word in vocabulary[2000::10] if word.isalpha()]
    return [" ".join(words[start : start + 40]) for start in range(0, len(words), 40)]


def _resident_kb(path: Path) -> int:
    """Return this process's resident kB of its mappings of ``path``."""
    return sum(area.rss_kb for area in areas() or () if area.path == str(path.resolve()))


@pytest.mark.skipif(sys.platform != "linux", reason="Linux's /proc/self/smaps")
async def test_an_idle_onnx_runtime_model_lets_go_of_its_weights_pages_and_keeps_its_vectors() -> (
    None
):
    """ONNX Runtime computes in an arena it keeps, and reads the word embeddings' rows from its
    mapping of the export's data file, each page a text touched staying resident. Idle, the
    model shrinks the arena and lets go of those pages: the process holds less, and the next
    calls read them back and get the same vectors to the bit."""
    texts = _words_across_the_vocabulary()  # ~2,800 words, each on a page of its own
    model = OnnxEmbedder(engine="onnxruntime", threads=2, idle_seconds=0.2)
    before = await model.embed(texts)
    name = export_name(bundled_minilm_path(), MINILM_NAME, int8=False)
    weights = data_file(default_model_cache() / name)
    assert _resident_kb(weights) > 8_000
    held = anonymous_kb()

    await _released(model, 1)

    assert _resident_kb(weights) < 1_000
    assert anonymous_kb() < held - 8_000
    np.testing.assert_array_equal(before, await model.embed(texts))
    assert _resident_kb(weights) > 8_000  # read back as the texts ask


def test_a_model_idle_for_no_time_is_refused() -> None:
    """``idle_seconds`` and ``unload_seconds`` are positive times (None: never)."""
    with pytest.raises(ValueError, match="idle_seconds"):
        OnnxEmbedder(idle_seconds=0)
    with pytest.raises(ValueError, match="unload_seconds"):
        OnnxEmbedder(unload_seconds=-1)


@pytest.mark.skipif(sys.platform != "linux", reason="Linux's /proc/self/status")
@pytest.mark.parametrize("engine", ["openvino", "onnxruntime"])
async def test_a_model_idle_for_longer_is_let_go_of_and_loads_again_with_the_same_vectors(
    engine: Engine,
) -> None:
    """After ``idle_seconds`` the model gives back its working memory; after
    ``unload_seconds`` the model itself goes, its weights as the engine laid them out with it.
    The next text loads it again, on the same lanes, and gets the same vectors to the bit."""
    texts = [f"Turn {i}: the trip to Kyoto, " + "then more. " * (i % 40) for i in range(200)]
    model = OnnxEmbedder(engine=engine, threads=2, idle_seconds=0.2, unload_seconds=0.6)
    before = await model.embed(texts)
    await _released(model, 1)
    released = anonymous_kb()
    threads = threading.active_count()

    await _released(model, 1, unloads=True)

    assert not model.loaded
    assert anonymous_kb() < released - 20_000  # the weights the engine copied, at least
    np.testing.assert_array_equal(before, await model.embed(texts))
    assert model.loaded
    assert threads == threading.active_count()  # no thread left behind by the reload
    await _released(model, 2, unloads=True)


async def test_a_model_in_use_stays_loaded() -> None:
    """While texts keep coming, more often than ``idle_seconds``, nothing is let go of."""
    model = OnnxEmbedder(engine="onnxruntime", threads=2, idle_seconds=0.2, unload_seconds=0.3)
    for _ in range(10):  # a text every 0.1 s for 1 s
        await model.embed(["where do I live?"])
        await asyncio.sleep(0.1)

    assert (0, 0) == (model.releases, model.unloads)
    assert model.loaded
