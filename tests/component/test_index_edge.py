"""Tests for the Qdrant Edge index beyond the shared contract: disk, reopening, optimising."""

import asyncio
import json
from pathlib import Path
from uuid import uuid4

import numpy as np
import pytest
from structlog.testing import capture_logs

from memoryd.shared.adapters.index import (
    EdgeSearchIndex,
    IndexPayload,
    IndexPoint,
    Optimizing,
    ScopeFilter,
)

DIM = 8
ACME = ScopeFilter(tenant="acme")


def _points(count: int, seed: int = 0, text: str = "ferry to the island") -> list[IndexPoint]:
    """Return points with random unit vectors, all in tenant acme."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    payload = IndexPayload(tenant="acme", user_id="ann", kind="turn", occurred_at=1.0)
    return [IndexPoint(id=uuid4(), dense=v, text=text, payload=payload) for v in vectors]


async def _opened(path: Path, every: int | None = None) -> EdgeSearchIndex:
    """Return an open Edge index at the path."""
    index = EdgeSearchIndex(path, DIM, optimizing=Optimizing(every=every))
    await index.ensure_collection()
    return index


async def test_data_survives_close_and_reopen(tmp_path: Path) -> None:
    """Points written before close are found by dense and BM25 search after reopening."""
    points = _points(5)
    first = await _opened(tmp_path)
    await first.upsert(points)
    await first.close()
    reopened = await _opened(tmp_path)
    dense = await reopened.search_dense(points[3].dense, ACME, limit=1)
    sparse = await reopened.search_sparse("island", ACME)
    count = await reopened.count(ScopeFilter(tenant="acme", user_id="ann"))
    await reopened.close()
    assert [points[3].id] == [hit.id for hit in dense]
    assert {point.id for point in points} == {hit.id for hit in sparse}
    assert 5 == count


async def test_payloads_asked_in_ram_are_kept_there_also_in_a_shard_made_with_them_on_disk(
    tmp_path: Path,
) -> None:
    """Recall reads payloads by id; from disk that took ~5-10x as long after an optimisation.
    A shard made with payloads on disk is reopened with them in RAM when the setting asks,
    and keeps its points."""
    points = _points(3)
    first = await _opened(tmp_path)
    await first.upsert(points)
    await first.close()
    stored = _set_payload_on_disk(tmp_path)

    reopened = EdgeSearchIndex(tmp_path, DIM, payloads_in_ram=True)
    await reopened.ensure_collection()
    dense = await reopened.search_dense(points[1].dense, ACME, limit=1)
    await reopened.close()
    assert [points[1].id] == [hit.id for hit in dense]
    assert False is _stored_config(stored)["on_disk_payload"]


def _set_payload_on_disk(folder: Path) -> Path:
    """Mark the shard's stored config as made with payloads on disk; return the file."""
    [stored] = list(folder.rglob("edge_config.json"))
    stored.write_text(json.dumps(_stored_config(stored) | {"on_disk_payload": True}))
    return stored


def _stored_config(stored: Path) -> dict[str, object]:
    config: dict[str, object] = json.loads(stored.read_text())
    return config


@pytest.mark.parametrize("hosted", [False, True])
async def test_reopening_with_another_dimension_fails(tmp_path: Path, hosted: bool) -> None:
    """A folder built for 8-d vectors refuses to open as 16-d instead of corrupting searches,
    with the shard here or in the index host (whose error travels back, and which stops)."""
    await (await _opened(tmp_path)).close()
    index = EdgeSearchIndex(tmp_path, 16, hosted=hosted)
    with pytest.raises(Exception, match="vector size"):
        await index.ensure_collection()
    assert index.host_pid is None


async def test_use_before_opening_fails_with_a_hint(tmp_path: Path) -> None:
    """Searching an index that was never opened says to call ensure_collection()."""
    with pytest.raises(RuntimeError, match="ensure_collection"):
        await EdgeSearchIndex(tmp_path, DIM).count(ACME)


async def test_use_after_close_fails_with_a_hint(tmp_path: Path) -> None:
    """A closed index refuses further work instead of touching a released shard."""
    index = await _opened(tmp_path)
    await index.close()
    await index.close()
    with pytest.raises(RuntimeError, match="ensure_collection"):
        await index.search_sparse("island", ACME)


async def test_auto_optimize_runs_after_the_configured_count(tmp_path: Path) -> None:
    """With every=10, optimisation runs once 10 points are upserted, not before."""
    index = await _opened(tmp_path, every=10)
    with capture_logs() as logs:
        await index.upsert(_points(6, seed=1))
        before = [log for log in logs if log["event"] == "edge_index.optimized"]
        await index.upsert(_points(6, seed=2))
    after = [log for log in logs if log["event"] == "edge_index.optimized"]
    await index.close()
    assert [] == before
    assert 1 == len(after)


async def test_optimize_keeps_every_answer(tmp_path: Path) -> None:
    """Searches and counts answer the same after optimising, deletions included."""
    points = _points(300, seed=3)
    index = await _opened(tmp_path)
    await index.upsert(points)
    await index.delete([point.id for point in points[:50]])
    query = points[100].dense
    before = await index.search_dense(query, ACME, limit=20)
    await index.optimize()
    after = await index.search_dense(query, ACME, limit=20)
    count = await index.count(ACME)
    await index.close()
    assert [hit.id for hit in before] == [hit.id for hit in after]
    assert 250 == count


@pytest.mark.parametrize("hosted", [False, True])
async def test_concurrent_searches_writes_and_optimize(tmp_path: Path, hosted: bool) -> None:
    """Eight concurrent searches alongside an upsert and an optimisation all succeed, with the
    shard in this process or in the index host."""
    index = EdgeSearchIndex(tmp_path, DIM, hosted=hosted)
    await index.ensure_collection()
    await index.upsert(_points(200, seed=4))
    queries = _points(8, seed=5)
    writes = asyncio.gather(index.upsert(_points(200, seed=6)), index.optimize())
    searches = asyncio.gather(*(index.search_dense(q.dense, ACME, limit=5) for q in queries))
    _, found = await asyncio.gather(writes, searches)
    count = await index.count(ACME)
    await index.close()
    assert [5] * 8 == [len(hits) for hits in found]
    assert 400 == count


def _wide_points(count: int, seed: int, dimension: int = 384) -> list[IndexPoint]:
    """Return points of MiniLM's width: Edge indexes a segment only past ~10,000 KB."""
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, dimension)).astype(np.float32)
    payload = IndexPayload(tenant="acme", user_id="ann", kind="turn", occurred_at=1.0)
    return [IndexPoint(id=uuid4(), dense=v, text="ferry", payload=payload) for v in vectors]


@pytest.mark.parametrize(("segment_points", "segments"), [(None, 2), (7_000, 3)])
async def test_bounded_segments_keep_what_was_indexed_and_index_only_what_is_new(
    tmp_path: Path, segment_points: int | None, segments: int
) -> None:
    """Unbounded, the second optimisation merges everything into one rebuilt segment (its
    time grows with the index); bounded, it indexes the new points into a segment of their
    own. Every point is found either way."""
    index = EdgeSearchIndex(tmp_path, 384, segment_points=segment_points)
    await index.ensure_collection()
    first, second = _wide_points(8_000, seed=1), _wide_points(8_000, seed=2)
    await index.upsert(first)
    await index.optimize()
    await index.upsert(second)
    await index.optimize()
    found = await index.search_dense(second[5].dense, ACME, limit=1)
    count = await index.count(ACME)
    info = await index.info()
    await index.close()
    assert (segments, 16_000) == (info.segments, info.points)
    assert ([second[5].id], 16_000) == ([hit.id for hit in found], count)


def _resident_kb(pid: int, part: str) -> int:
    """Return how much of the files whose path holds ``part`` is in ``pid``'s resident set."""
    resident, counting = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's first line
            counting = len(fields) > 5 and part in fields[5]
        elif counting and fields[0] == "Rss:":
            resident += int(fields[1])
    return resident


async def test_a_shard_opened_keeps_neither_its_log_nor_its_payload_indexes_in_memory(
    tmp_path: Path,
) -> None:
    """Loading reads the shard's write-ahead log and its payload indexes' files; the index
    host then lets go of those pages, and scoped searches do not read them again: they find
    what they found before."""
    points = _points(3_000)
    first = EdgeSearchIndex(tmp_path, DIM, hosted=True)
    await first.ensure_collection()
    await first.upsert(points)
    scope = ScopeFilter(tenant="acme", user_id="ann")
    before = [await first.search_dense(point.dense, scope, limit=5) for point in points[:20]]
    await first.close()
    reopened = EdgeSearchIndex(tmp_path, DIM, hosted=True)
    await reopened.ensure_collection()
    try:
        assert reopened.host_pid is not None
        after = [await reopened.search_dense(point.dense, scope, limit=5) for point in points[:20]]
        log_kb = _resident_kb(reopened.host_pid, "/wal/")
        indexes_kb = _resident_kb(reopened.host_pid, "payload_index")
    finally:
        await reopened.close()
    assert [[hit.id for hit in hits] for hits in before] == [
        [hit.id for hit in hits] for hits in after
    ]
    assert log_kb < 64
    assert indexes_kb < 64


async def test_a_shard_opened_reads_its_vectors_and_payloads_in_only_as_searches_need_them(
    tmp_path: Path,
) -> None:
    """A segment keeps its dense vectors, and its payloads, in 32 MB files however few it
    holds; opening the shard leaves those files out of the index host's memory (it read all
    of them before), and a search still finds the nearest point with its payload."""
    points = _points(100)
    first = EdgeSearchIndex(tmp_path, DIM, hosted=True)
    await first.ensure_collection()
    await first.upsert(points)
    await first.close()
    reopened = EdgeSearchIndex(tmp_path, DIM, hosted=True)
    await reopened.ensure_collection()
    try:
        assert reopened.host_pid is not None
        vectors_kb = _resident_kb(reopened.host_pid, "vector_storage-dense")
        payloads_kb = _resident_kb(reopened.host_pid, "payload_storage")
        dense = await reopened.search_dense(points[7].dense, ACME, limit=1)
    finally:
        await reopened.close()
    assert vectors_kb < 4 * 1024
    assert payloads_kb < 4 * 1024
    assert [(points[7].id, "ann")] == [(hit.id, hit.payload.user_id) for hit in dense]
