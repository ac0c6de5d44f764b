"""The memoryd side of ``memoryd bench peers``: `memoryd up` in a fresh folder, the SDK only.

`memoryd up` is the embedded default with every component, on its own port, in a temporary
folder; this process is its client (``MemoryClient``: record_turn, wait_until_applied, recall).
A write counts once every projection has applied it. Run by ``peers.run_side``.
"""

from __future__ import annotations

import asyncio
import compileall
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

import memoryd.services
import memoryd.shared
from memoryd.services.bench.peers import (
    LIMIT,
    Figures,
    PeerOptions,
    TreeRss,
    Workload,
    load_workload,
    measure_phases,
    progress,
    side_main,
)
from memoryd.services.bootstrap import EmbedderRole, build_model, key_options, warm_embedder
from memoryd.services.indexer.items import KeyOptions, Upsert, plan
from memoryd.shared.adapters.embedded_nats import free_port
from memoryd.shared.adapters.nats_log import NatsUnavailable
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Scope, TurnRecorded
from memoryd.shared.settings import Settings

SCOPE = Scope(tenant="bench", user_id="bench", agent_id="peer", session_id="s1")
WARM_SCOPE = Scope(tenant="bench", user_id="warmup")
START_TIMEOUT_S = 600.0  # the first start on a machine also exports the model (~20 s)
APPLY_TIMEOUT_S = 3_600.0
RECALL_TIMEOUT_S = 60.0
# Settings that would point `memoryd up` away from the embedded default; the rest pass through.
NOT_EMBEDDED = frozenset(
    {
        "MEMORYD_NATS_URL",
        "MEMORYD_DATABASE_URL",
        "MEMORYD_QDRANT_URL",
        "MEMORYD_DATA_DIR",
        "MEMORYD_EMBEDDED_NATS_PORT",
    }
)


def user_scope(user: int, users: int) -> Scope:
    """Return the scope of the bench's ``user``-th user (SCOPE when there is one)."""
    if users == 1:
        return SCOPE
    return Scope(tenant="bench", user_id=f"bench-{user}", agent_id="peer", session_id="s1")


class MemorydPeer:
    """memoryd through its SDK: one turn per message, recall with limit 10."""

    name = "memoryd"

    def __init__(self, client: MemoryClient, users: int) -> None:
        self._client = client
        self._scopes = [user_scope(user, users) for user in range(users)]

    async def write(self, user: int, index: int, text: str) -> None:
        """Record the message as a turn (no response), like the reference script."""
        await self._client.record_turn(self._scopes[user], text, "")

    async def settle(self) -> None:
        """Wait until every projection has applied everything written."""
        await self._client.wait_until_applied(timeout=APPLY_TIMEOUT_S)

    async def search(self, user: int, query: str) -> int:
        """Recall with limit 10; return how many hybrid results came back.

        Every turn is in one session here: ``max_per_session`` is the limit, so recall ranks
        ten items as mem0's search does (the default keeps three per session).
        """
        answer = await self._client.recall(
            self._scopes[user], query, limit=LIMIT, max_per_session=LIMIT, timeout=RECALL_TIMEOUT_S
        )
        return len(answer.items)

    async def load_search(self, user: int, query: str) -> int:
        """Recall as one of several callers: requests are concurrent on one connection."""
        return await self.search(user, query)


def _environment(folder: Path) -> dict[str, str]:
    kept = {key: value for key, value in os.environ.items() if key not in NOT_EMBEDDED}
    return kept | {
        "MEMORYD_DATA_DIR": str(folder / ".memoryd"),
        "MEMORYD_EMBEDDED_NATS_PORT": str(free_port()),
        "MEMORYD_LOG_FORMAT": "json",
    }


@dataclass(frozen=True)
class Up:
    """A `memoryd up` child: the process, the URL of its NATS, when it was spawned."""

    process: subprocess.Popen[bytes]
    url: str
    spawned_at: float  # time.monotonic()


def spawn_up(folder: Path) -> Up:
    """Start `memoryd up` in ``folder``, its log in ``folder``/up.log."""
    env = _environment(folder)
    with (folder / "up.log").open("wb") as log:
        spawned_at = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "memoryd.services.cli", "up"],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Up(process, f"nats://127.0.0.1:{env['MEMORYD_EMBEDDED_NATS_PORT']}", spawned_at)


def _check_running(process: subprocess.Popen[bytes], deadline: float) -> None:
    if process.poll() is not None:
        raise RuntimeError(f"memoryd up exited with status {process.returncode}")
    if time.monotonic() > deadline:
        raise TimeoutError(f"memoryd up did not answer a recall within {START_TIMEOUT_S:.0f} s")


async def _connect(process: subprocess.Popen[bytes], url: str, deadline: float) -> MemoryClient:
    while True:
        try:
            return await MemoryClient.connect(url, timeout=2.0)
        except NatsUnavailable:
            _check_running(process, deadline)
            await asyncio.sleep(0.05)


async def first_answer(up: Up) -> tuple[MemoryClient, float]:
    """Connect and recall until memoryd answers; return the client and seconds since spawn."""
    deadline = up.spawned_at + START_TIMEOUT_S
    client = await _connect(up.process, up.url, deadline)
    while True:
        try:
            await client.recall(WARM_SCOPE, "warm-up", timeout=RECALL_TIMEOUT_S)
            return client, time.monotonic() - up.spawned_at
        except (NoRespondersError, NatsTimeoutError):  # recall is not subscribed yet
            _check_running(up.process, deadline)
            await asyncio.sleep(0.05)


async def _warm_up(client: MemoryClient) -> None:
    # Outside the timing, as the reference script: a first write through every projection.
    await client.record_turn(WARM_SCOPE, "warm-up memory", "")
    await client.wait_until_applied(timeout=APPLY_TIMEOUT_S)
    await client.recall(WARM_SCOPE, "warm-up", timeout=RECALL_TIMEOUT_S)


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop `memoryd up` as Ctrl-C would; kill it if it does not stop in 30 s."""
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


async def _measure_running(up: Up, workload: Workload, options: PeerOptions) -> Figures:
    with TreeRss(up.process.pid, role=process_role) as sampled:
        client, cold_start = await first_answer(up)
        progress("memoryd", f"first recall answered {cold_start:.1f} s after spawning memoryd up")
        await _warm_up(client)
        peer = MemorydPeer(client, options.users)
        figures = await measure_phases(peer, workload, options, sampled)
        await client.close()
    return {"cold_start_s": cold_start, **figures, **sampled.figures()}


def process_role(command: str) -> str | None:
    """Name a process of `memoryd up`'s tree from its command line (None: not one of these)."""
    if "nats-server" in command:
        return "nats"
    if "index.edge_host" in command:
        return "host"
    if "index.edge_build" in command:
        return "build"
    return "main" if command.rstrip().endswith(" up") else None


def optimiser_peak_rss_mb(log: str) -> float:
    """Return the largest peak RSS of the index's optimising child in a JSON log (0: none ran).

    From the ``edge_index.optimized`` lines `memoryd up` logged (a build it finished): shown
    beside the tree's figures, which count the child from the sampler (``TreeRss``).
    """
    peaks = [0.0]
    for line in log.splitlines():
        if '"edge_index.optimized"' not in line:
            continue
        with contextlib.suppress(ValueError):
            peak = json.loads(line).get("child_peak_rss_mb")
            if isinstance(peak, int | float):
                peaks.append(float(peak))
    return max(peaks)


def key_texts(texts: Sequence[str], keys: KeyOptions, users: int = 1) -> list[str]:
    """Return the distinct texts the indexer embeds for these turns, written to ``users``
    users in turn (each user one conversation)."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    turns = [
        TurnRecorded(
            occurred_at=start + timedelta(seconds=n),
            scope=user_scope(n % users, users),
            query=text,
            response="",
        )
        for n, text in enumerate(texts)
    ]
    operations, _ = plan(turns, None, keys)
    embedded = (text for op in operations if isinstance(op, Upsert) for text in op.texts())
    return list(dict.fromkeys(embedded))


def pipeline_share(write_rate: float, keys_per_turn: float, model_rate: float) -> float:
    """Return the texts/s the pipeline embedded while writing, over the model's own rate."""
    return write_rate * keys_per_turn / model_rate if model_rate else 0.0


async def prepare_models() -> None:
    """Export and compile the configured models as an install would, before the clock starts.

    A machine's first `memoryd up` exports the bundled model to ONNX and compiles it for the
    CPU, once; the bench measures memoryd as installed, as mem0 with its model on disk. On a
    fresh AVX512-BF16 machine the first start took 10.5 s to its first recall (the tree at
    once 1,925 MB, the export's torch included) where a prepared one took 1.1-1.5 s. A model
    that cannot load stops the bench here, saying why, as it would stop `memoryd up`.
    """
    settings = Settings()
    roles: tuple[EmbedderRole, ...] = ("workers", "queries")
    for role in roles:
        await warm_embedder(build_model(settings, role), settings)


async def model_alone(workload: Workload, options: PeerOptions) -> Figures:
    """Time the configured model alone on the keys of the first n-write turns (memoryd down)."""
    texts = [workload.text(n) for n in range(options.n_write)]
    settings = Settings()
    keys = key_texts(texts, key_options(settings), options.users)
    model = build_model(settings, "workers")
    await model.embed(["warm-up"])
    started = time.perf_counter()
    await model.embed(keys)
    return {
        "keys_per_turn": len(keys) / len(texts),
        "model_texts_per_s": len(keys) / (time.perf_counter() - started),
    }


@contextlib.contextmanager
def byte_compiled(folders: Sequence[Path]) -> Iterator[None]:
    """Byte-compile the Python sources under ``folders`` for the run, as an install does; on
    leaving, remove the files this wrote (none where they were compiled already).

    pip compiles a package it installs (so mem0 here, and memoryd in its image); an editable
    install is compiled by its first import, unless PYTHONDONTWRITEBYTECODE is set, as on the
    bench machines, when every start compiles memoryd's own modules again: `memoryd up` to
    the first recall 3.48-3.61 s there, 2.73-3.01 s compiled.
    """
    before = {path for folder in folders for path in folder.rglob("*.pyc")}
    try:
        for folder in folders:
            compileall.compile_dir(folder, quiet=2)  # where it cannot write, it starts as it is
        yield
    finally:
        for folder in folders:
            for path in set(folder.rglob("*.pyc")) - before:
                path.unlink(missing_ok=True)
            for cache in folder.rglob("__pycache__"):
                with contextlib.suppress(OSError):
                    cache.rmdir()  # only an empty one: this run made it


def memoryd_sources() -> list[Path]:
    """Return the folders of memoryd's Python packages, wherever it is installed."""
    return [
        Path(folder)
        for package in (memoryd.shared, memoryd.services)
        for folder in package.__path__
    ]


async def measure(options: PeerOptions, _parent_spawned_at: float) -> Figures:
    """Run the phases against a fresh `memoryd up`, then the model alone on the same keys."""
    workload = load_workload(options.dataset())  # before the clock starts
    await prepare_models()
    with (
        byte_compiled(memoryd_sources()),
        tempfile.TemporaryDirectory(prefix="memoryd-peers-") as folder,
    ):
        up = spawn_up(Path(folder))
        try:
            figures = await _measure_running(up, workload, options)
        except BaseException:
            log = (Path(folder) / "up.log").read_text(errors="replace")
            print(f"memoryd up's log (last lines):\n{log[-4_000:]}", file=sys.stderr)
            raise
        finally:
            stop(up.process)
        child = optimiser_peak_rss_mb((Path(folder) / "up.log").read_text(errors="replace"))
    figures["peak_rss_optimiser_mb"] = child
    alone = await model_alone(workload, options)
    share = pipeline_share(
        figures["write_msgs_per_s"], alone["keys_per_turn"], alone["model_texts_per_s"]
    )
    return figures | alone | {"pipeline_vs_model": share}


if __name__ == "__main__":
    side_main(measure, sys.argv[1:])
