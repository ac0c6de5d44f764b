"""The Edge index optimised in a child process: nothing written meanwhile is lost, searches go
on, the folder switches generations safely, and a quiet spell starts one.

Real parts: Qdrant Edge in this process and in the child (`edge_build`), on disk.
"""

import asyncio
from pathlib import Path
from typing import Any
from uuid import uuid4

import numpy as np
import pytest
import qdrant_edge as qe
from structlog.testing import capture_logs

from memoryd.shared.adapters.index import (
    EdgeSearchIndex,
    IndexPayload,
    IndexPoint,
    Optimizing,
    ScopeFilter,
)
from memoryd.shared.adapters.index.edge_build import Generations
from memoryd.shared.adapters.index.layout import edge_config

DIM = 384  # Edge builds a segment's HNSW only past ~10,000 KB of vectors (~6,700 of these)
ACME = ScopeFilter(tenant="acme")
BUILT = 7_000


def _points(count: int, seed: int, user: str = "ann") -> list[IndexPoint]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    payload = IndexPayload(tenant="acme", user_id=user, kind="turn", occurred_at=1.0)
    return [IndexPoint(id=uuid4(), dense=v, text="ferry", payload=payload) for v in vectors]


async def _filled(
    path: Path, count: int = BUILT, *, hosted: bool = False, **policy: Any
) -> EdgeSearchIndex:
    optimizing = Optimizing(in_background=True, **policy)
    index = EdgeSearchIndex(path, DIM, optimizing=optimizing, hosted=hosted)
    await index.ensure_collection()
    points = _points(count, seed=1)
    for start in range(0, count, 1_000):
        await index.upsert(points[start : start + 1_000])
    return index


async def _left_unindexed(path: Path, *, hosted: bool = False, **policy: Any) -> EdgeSearchIndex:
    """Return the index reopened with this policy over ``BUILT`` points a run before wrote and
    left outside any HNSW: opening starts the quiet spell, and none were written in this run
    (written here, ``quiet_points`` of them would start a build by their count)."""
    first = await _filled(path)  # no ``every``: nothing builds by itself
    await first.close()
    optimizing = Optimizing(in_background=True, **policy)
    index = EdgeSearchIndex(path, DIM, optimizing=optimizing, hosted=hosted)
    await index.ensure_collection()
    return index


def _names(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


async def _copy_started(home: Path) -> None:
    """Return once the background optimisation has begun its copy (gen-1 exists)."""
    for _ in range(10_000):
        if (home / "gen-1").is_dir():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("no copy was started")


def _optimized(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [log for log in logs if log["event"] == "edge_index.optimized"]


async def _until_optimized(logs: list[dict[str, Any]]) -> None:
    """Return once an optimisation was logged, or after 60 s."""
    for _ in range(600):
        if _optimized(logs):
            return
        await asyncio.sleep(0.1)


async def _search_without_a_pause(index: EdgeSearchIndex, times: int, apart: float) -> None:
    """Search ann's points ``times`` times, ``apart`` seconds apart."""
    query = _points(1, seed=9)[0].dense
    for _ in range(times):
        await index.search_dense(query, ScopeFilter(tenant="acme", user_id="ann"), 5)
        await asyncio.sleep(apart)


HOSTED = pytest.mark.parametrize("hosted", [False, True], ids=["inline", "hosted"])


@HOSTED
async def test_writes_taken_while_it_optimises_are_all_kept(tmp_path: Path, hosted: bool) -> None:
    """Upserts, deletes by id and by filter that land while the child works are in the index
    it switches to, and still there after reopening; the HNSW was built by the child. The
    same with the shard in the index host."""
    index = await _filled(tmp_path, hosted=hosted)
    ann = ScopeFilter(tenant="acme", user_id="ann")
    doomed = [hit.id for hit in await index.search_dense(_points(1, seed=9)[0].dense, ann, 30)]
    late = _points(50, seed=2)
    bob = _points(20, seed=3, user="bob")
    with capture_logs() as logs:
        building = asyncio.ensure_future(index.optimize_in_background())
        await _copy_started(tmp_path)  # the writes below come after the copy
        await index.upsert(late + bob)
        await index.delete(doomed)
        await index.delete_where(ScopeFilter(tenant="acme", user_id="bob"))
        await building
    nearest = await index.search_dense(late[7].dense, ACME, limit=1)
    count = await index.count(ACME)
    await index.close()
    reopened = EdgeSearchIndex(tmp_path, DIM)
    await reopened.ensure_collection()
    reopened_count = await reopened.count(ACME)
    gone = await reopened.search_dense(_points(1, seed=9)[0].dense, ann, 30)
    await reopened.close()
    [optimized] = _optimized(logs)
    assert (optimized["where"], optimized["changed"]) == ("child_process", True)
    assert optimized["indexed_vectors"] >= BUILT  # the dense vectors are in an HNSW now
    assert optimized["child_peak_rss_mb"] > 0
    assert [late[7].id] == [hit.id for hit in nearest]
    assert BUILT + 50 - 30 == count == reopened_count
    assert not set(doomed) & {hit.id for hit in gone}
    assert _names(tmp_path) == ["CURRENT", "gen-1"]


@HOSTED
async def test_searches_are_answered_while_the_child_optimises(
    tmp_path: Path, hosted: bool
) -> None:
    """The event loop is not held while the index optimises: searches started after the
    child was spawned come back before the optimisation ends."""
    index = await _filled(tmp_path, hosted=hosted)
    query = _points(1, seed=4)[0].dense
    building = asyncio.ensure_future(index.optimize_in_background())
    await _copy_started(tmp_path)
    answered = 0
    while not building.done():
        await index.search_dense(query, ACME, limit=5)
        answered += 1
        await asyncio.sleep(0)
    await building
    await index.close()
    assert answered > 1


@HOSTED
async def test_a_quiet_spell_starts_an_optimisation_in_the_background(
    tmp_path: Path, hosted: bool
) -> None:
    """Past ``quiet_points`` outside any HNSW, ``quiet_seconds`` without a write start one
    (``every`` is far off), and later writes start none until another quiet spell.
    ``quiet_points`` is at Edge's own threshold: below it an optimisation would leave the
    segment unindexed."""
    with capture_logs() as logs:
        index = await _left_unindexed(
            tmp_path, hosted=hosted, every=1_000_000, quiet_points=6_700, quiet_seconds=0.2
        )
        await _until_optimized(logs)
        await index.upsert(_points(10, seed=5))
        await asyncio.sleep(0.5)
        await index.close()
    assert [("child_process", True)] == [(o["where"], o["changed"]) for o in _optimized(logs)]


async def test_searches_hold_the_quiet_spells_optimisation_until_they_pause(
    tmp_path: Path,
) -> None:
    """While searches come, a quiet spell of writes starts nothing: beside recall, the child
    took the cores its searches needed. Once they pause for ``quiet_seconds``, it starts."""
    with capture_logs() as logs:
        index = await _left_unindexed(
            tmp_path, every=1_000_000, quiet_points=6_700, quiet_seconds=0.3
        )
        await _search_without_a_pause(index, 20, 0.1)  # 2 s: no spell of 0.3 s in them
        copied_while_searched = (tmp_path / "gen-1").exists()  # a build begins by copying
        await _until_optimized(logs)
        await index.close()
    assert not copied_while_searched
    assert [("child_process", True)] == [(o["where"], o["changed"]) for o in _optimized(logs)]


@HOSTED
async def test_searches_without_a_pause_hold_it_off_no_later_than_latest_seconds(
    tmp_path: Path, hosted: bool
) -> None:
    """A scope searched without a pause would otherwise stay a scan for as long as it is
    searched: ``latest_seconds`` after the last write (here the open) the optimisation starts
    regardless, and the searches beside it are answered."""
    ann = ScopeFilter(tenant="acme", user_id="ann")
    query = _points(1, seed=9)[0].dense
    with capture_logs() as logs:
        index = await _left_unindexed(
            tmp_path,
            hosted=hosted,
            every=1_000_000,
            quiet_points=6_700,
            quiet_seconds=0.3,
            latest_seconds=1.0,
        )
        written = asyncio.get_running_loop().time()
        started_at = None
        for _ in range(600):  # searches 0.05 s apart, up to ~30 s: never a 0.3 s pause
            await index.search_dense(query, ann, 5)
            if started_at is None and (tmp_path / "gen-1").exists():  # a build begins by copying
                started_at = asyncio.get_running_loop().time() - written
            if _optimized(logs):
                break
            await asyncio.sleep(0.05)
        found = await index.search_dense(query, ann, 5)
        await index.close()
    assert started_at is not None
    assert 0.9 <= started_at  # not before the latest: the searches did hold it off
    assert [("child_process", True)] == [(o["where"], o["changed"]) for o in _optimized(logs)]
    assert _optimized(logs)[0]["indexed_vectors"] >= BUILT
    assert len(found) == 5


async def test_a_mostly_indexed_index_searched_without_a_pause_waits_past_the_latest(
    tmp_path: Path,
) -> None:
    """Past the latest, a tail that is a small share of the index is left to the next pause:
    a build costs the whole index, the tail costs a search its share. Once searches pause,
    it starts."""
    policy = {"every": 1_000_000, "quiet_points": 1_000, "quiet_seconds": 0.3}
    index = await _filled(tmp_path, latest_seconds=0.6, **policy)
    await index.optimize()  # here and now (after a build the fill began): all in an HNSW
    # The fill's own build may have made a generation; one begun beside the searches is next.
    next_build = Generations(tmp_path).next()
    with capture_logs() as logs:
        await index.upsert(_points(1_500, seed=6))  # 1,500 of 8,500 outside any HNSW
        await _search_without_a_pause(index, 40, 0.05)  # 2 s: past the latest, never a pause
        # A build begins by copying; one that found nothing to change is gone, but logged.
        built_while_searched = next_build.exists() or bool(_optimized(logs))
        await _until_optimized(logs)
        await index.close()
    assert not built_while_searched
    assert ["child_process"] == [o["where"] for o in _optimized(logs)]


async def test_points_a_run_before_left_unindexed_are_optimised_after_a_restart(
    tmp_path: Path,
) -> None:
    """An index reopened with points outside any HNSW (the run before stopped before its
    quiet spell) optimises after one, with no write in this run."""
    with capture_logs() as logs:
        index = await _left_unindexed(
            tmp_path, every=1_000_000, quiet_points=6_700, quiet_seconds=0.2
        )
        await _until_optimized(logs)
        count = await index.count(ACME)
        await index.close()
    assert [("child_process", True)] == [(o["where"], o["changed"]) for o in _optimized(logs)]
    assert BUILT == count


async def test_a_first_fill_is_built_once_quiet_points_are_written_without_a_quiet_spell(
    tmp_path: Path,
) -> None:
    """An index filled without a pause is built as soon as ``quiet_points`` were written, not
    at ``every`` nor after a quiet spell; fewer new points than that start no other build
    (3,000 more: no copy for a second one, gen-2, is begun)."""
    policy = {"every": 1_000_000, "quiet_points": 6_700, "quiet_seconds": 60.0}
    with capture_logs() as logs:
        index = await _filled(tmp_path, latest_seconds=60.0, **policy)
        await _until_optimized(logs)
        await index.upsert(_points(3_000, seed=7))
        await asyncio.sleep(1.0)
        built_again = (tmp_path / "gen-2").exists()  # a build begins by copying
        info = await index.info()
        await index.close()
    assert not built_again
    assert [("child_process", True)] == [(o["where"], o["changed"]) for o in _optimized(logs)]
    assert _optimized(logs)[0]["indexed_vectors"] - _optimized(logs)[0]["points"] >= 6_700
    assert BUILT + 3_000 == info.points


def test_the_latest_cannot_come_before_the_quiet_spell() -> None:
    """A bound shorter than the spell it bounds is refused at once, naming both."""
    with pytest.raises(ValueError, match=r"latest_seconds .* quiet_seconds"):
        Optimizing(in_background=True, quiet_seconds=10.0, latest_seconds=5.0)


async def test_a_home_from_before_generations_moves_into_one(tmp_path: Path) -> None:
    """A shard at the top of the folder (as earlier versions kept it) is loaded, optimised
    into gen-1, and its old files removed; nothing else in the folder is touched."""
    shard = qe.EdgeShard.create(str(tmp_path), edge_config(DIM))
    shard.close()
    (tmp_path / "notes.txt").write_text("kept")
    index = await _filled(tmp_path)
    await index.optimize_in_background()
    count = await index.count(ACME)
    await index.close()
    assert BUILT == count
    assert _names(tmp_path) == ["CURRENT", "gen-1", "notes.txt"]


@HOSTED
async def test_an_interrupted_build_is_removed_and_the_shard_kept(
    tmp_path: Path, hosted: bool
) -> None:
    """Closing during a build stops the child and removes its copy; a copy left by a crash is
    removed at the next open. The shard in use answers as before."""
    index = await _filled(tmp_path, hosted=hosted)
    building = asyncio.ensure_future(index.optimize_in_background())
    await _copy_started(tmp_path)
    await index.close()
    left_by_close = _names(tmp_path)
    (tmp_path / "gen-7").mkdir()  # as a crash mid-build would leave it
    reopened = EdgeSearchIndex(tmp_path, DIM)
    await reopened.ensure_collection()
    count = await reopened.count(ACME)
    await reopened.close()
    assert building.done()
    assert ["gen-0"] == left_by_close
    assert ["gen-0"] == _names(tmp_path)
    assert BUILT == count


async def test_optimising_here_waits_for_the_one_in_the_background(tmp_path: Path) -> None:
    """`optimize()` during a background optimisation runs after its switch, so what it
    builds is what the index keeps; every point is still there."""
    index = await _filled(tmp_path)
    with capture_logs() as logs:
        building = asyncio.ensure_future(index.optimize_in_background())
        await _copy_started(tmp_path)
        await index.optimize()
        await building
    count = await index.count(ACME)
    await index.close()
    assert ["child_process", "in_process"] == [o["where"] for o in _optimized(logs)]
    assert BUILT == count
