"""The Edge index with its shard in the index host, a child process: what survives the host's
death, the serving process's death, Ctrl-C, and a shard another process still holds.

Real parts: Qdrant Edge in the host (``python -m memoryd.shared.adapters.index.edge_host``),
on disk; processes killed with real signals.
"""

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from uuid import uuid4

import numpy as np
import pytest
import qdrant_edge as qe

from memoryd.shared.adapters.index import EdgeSearchIndex, IndexPayload, IndexPoint, ScopeFilter
from memoryd.shared.adapters.index.edge_engine import Engine, Info, ShardSpec, Store, StoredPoint
from memoryd.shared.adapters.index.edge_host import HostedShards, HostExited
from memoryd.shared.adapters.index.layout import edge_config
from memoryd.shared.adapters.pages import areas

DIM = 8
ACME = ScopeFilter(tenant="acme")


def _points(count: int, seed: int = 0) -> list[IndexPoint]:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((count, DIM))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    payload = IndexPayload(tenant="acme", user_id="ann", kind="turn", occurred_at=1.0)
    return [IndexPoint(id=uuid4(), dense=v, text="ferry", payload=payload) for v in vectors]


def _gone(pid: int, within: float) -> bool:
    """Say whether process ``pid`` has exited (or is a zombie) within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):  # reaped before or while it was read
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


async def test_a_killed_host_is_replaced_and_keeps_what_was_written(tmp_path: Path) -> None:
    """SIGKILL of the index host loses nothing written before: the next search starts a new
    host, which reopens the shard (from its write-ahead log) and answers."""
    index = EdgeSearchIndex(tmp_path, DIM, hosted=True)
    await index.ensure_collection()
    points = _points(20)
    await index.upsert(points)
    first = index.host_pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert _gone(first, 10.0)
    nearest = await index.search_dense(points[4].dense, ACME, limit=1)
    count = await index.count(ACME)
    second = index.host_pid
    await index.close()
    assert [points[4].id] == [hit.id for hit in nearest]
    assert 20 == count
    assert second not in (None, first)


async def test_a_call_to_a_dead_host_says_so(tmp_path: Path) -> None:
    """Asked after its host died, the transport raises HostExited with the exit status."""
    host = HostedShards()
    await host.start()
    opened = await host.open(ShardSpec(str(tmp_path / "gen-0"), DIM))
    assert host.pid is not None
    os.kill(host.pid, signal.SIGKILL)
    assert _gone(host.pid, 10.0)
    with pytest.raises(HostExited, match="status -9"):
        await host.close(opened.handle)
    with pytest.raises(HostExited, match="status -9"):
        await host.close(opened.handle)  # and so does every call after
    await host.stop()


async def test_an_engine_error_comes_back_as_itself(tmp_path: Path) -> None:
    """An error raised in the host reaches the caller with its type and message, and the host
    goes on answering."""
    host = HostedShards()
    await host.start()
    with pytest.raises(RuntimeError, match="no Edge shard is open under number 7"):
        await host.run(7, Info())
    opened = await host.open(ShardSpec(str(tmp_path / "gen-0"), DIM))
    await host.close(opened.handle)
    await host.stop()
    assert 1 == opened.handle


async def test_ctrl_c_to_the_process_group_leaves_the_host_serving(tmp_path: Path) -> None:
    """The terminal sends SIGINT to every process of the group; the host ignores it (the
    serving process closes it in order, flushing), so searches go on."""
    index = EdgeSearchIndex(tmp_path, DIM, hosted=True)
    await index.ensure_collection()
    points = _points(5)
    await index.upsert(points)
    pid = index.host_pid
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    await asyncio.sleep(0.3)
    count = await index.count(ACME)
    await index.close()
    assert 5 == count
    assert pid == index.host_pid or index.host_pid is None
    assert _gone(pid, 10.0)  # closed: the host exited


_SERVING = textwrap.dedent(
    """
    import asyncio, sys
    from memoryd.shared.adapters.index import EdgeSearchIndex

    async def main():
        index = EdgeSearchIndex(sys.argv[1], 8, hosted=True)
        await index.ensure_collection()
        print("host", index.host_pid, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def test_the_host_leaves_with_the_serving_process(tmp_path: Path) -> None:
    """SIGKILL of the serving process leaves no index host behind, and the shard it held can
    be opened again at once (the next opener waits for the host to let go)."""
    serving = subprocess.Popen(
        [sys.executable, "-c", _SERVING, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    assert serving.stdout is not None
    host = next(int(line.split()[1]) for line in serving.stdout if line.startswith("host "))
    serving.kill()
    serving.wait(10)
    engine = Engine()
    opened = engine.open(ShardSpec(str(tmp_path / "gen-0"), DIM))
    engine.close_all()
    assert _gone(host, 10.0)
    assert 0 == opened.points


def _log_kb(folder: Path) -> int:
    """Return how many kB of the shard's write-ahead log in ``folder`` this process holds."""
    return sum(area.rss_kb for area in areas() or () if area.path.startswith(f"{folder}/wal/"))


def test_the_pages_written_to_the_log_are_let_go_of_and_nothing_is_lost(tmp_path: Path) -> None:
    """Edge writes every store to its write-ahead log through a mapping, and reads the log
    only when it loads the shard: a write past the interval lets go of those pages, where a
    shard whose interval has not passed keeps them. Every point stored is there on reload."""
    stored = tuple(
        StoredPoint(point.id, np.asarray(point.dense, dtype=np.float32).tobytes(), "", {})
        for point in _points(1_000)
    )
    releasing, keeping = Engine(log_release_seconds=0.0), Engine(log_release_seconds=3_600.0)
    released, kept = tmp_path / "released", tmp_path / "kept"
    for engine, folder in ((releasing, released), (keeping, kept)):
        engine.run(engine.open(ShardSpec(str(folder), DIM)).handle, Store(stored, 10.0))

    resident = {folder: _log_kb(folder) for folder in (released, kept)}

    releasing.close_all()
    keeping.close_all()
    reloaded = Engine()
    assert 1_000 == reloaded.open(ShardSpec(str(released), DIM)).points
    reloaded.close_all()
    assert 0 == resident[released]
    assert 64 <= resident[kept]


def test_opening_waits_for_a_shard_another_holder_releases(tmp_path: Path) -> None:
    """While another holder has the shard's write-ahead log, opening waits instead of failing,
    and succeeds once it is released."""
    folder = tmp_path / "gen-0"
    creator = Engine()
    creator.open(ShardSpec(str(folder), DIM))
    creator.close_all()
    held = qe.EdgeShard.load(str(folder), edge_config(DIM))
    releaser = threading.Timer(0.5, held.close)
    releaser.start()
    started = time.monotonic()
    engine = Engine()
    opened = engine.open(ShardSpec(str(folder), DIM))
    waited = time.monotonic() - started
    engine.close_all()
    releaser.join()
    assert waited >= 0.4
    assert 0 == opened.points


_CLOSE_A_SHARD = """
import sys, uuid
import numpy as np
from memoryd.shared.adapters.index.edge_engine import (
    Engine, Optimize, ShardSpec, Store, StoredPoint,
)
from tests.proc import anonymous_kb

rng = np.random.default_rng(0)
words = "ferry kyoto ramen broth nurse hospital lisbon trip plan greyhound".split()
engine = Engine()
handle = engine.open(ShardSpec(sys.argv[1], 384)).handle
for _ in range(10):
    engine.run(handle, Store(tuple(
        StoredPoint(
            uuid.uuid4(),
            rng.standard_normal(384).astype(np.float32).tobytes(),
            " ".join(rng.choice(words, 12)),
            {"tenant": "acme", "user_id": f"u{n % 50}", "kind": "turn", "occurred_at": 1.0},
        )
        for n in range(2_000)
    ), 10.0))
engine.run(handle, Optimize())
held = anonymous_kb()
engine.close(handle)
print(held, anonymous_kb())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="Linux's /proc/self/status")
def test_closing_a_shard_gives_its_memory_back_to_the_system(tmp_path: Path) -> None:
    """Edge frees a closed shard's structures into the C heap, which kept them (the index host
    closes the old generation after every optimisation): closing hands the free pages back.
    A fresh process, so that nothing else's memory moves the figures."""
    result = subprocess.run(
        [sys.executable, "-c", _CLOSE_A_SHARD, str(tmp_path / "shard")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    held, after = (int(kb) for kb in result.stdout.split())

    assert after < held - 30_000  # 79 -> 28 MB here; 79 -> 66 without the trim
