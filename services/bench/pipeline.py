"""``memoryd bench pipeline``: log append, STM apply, replay and recall latency, measured.

Everything runs on the embedded default (the wheel's nats-server, SQLite) in a fresh
temporary folder, so figures are comparable between runs on the same machine.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memoryd.services.bench.embedded import embedded_nats
from memoryd.services.bootstrap import Component, Stack, start_stack
from memoryd.services.runtime.progress import Progress, quiet, watching_consumers
from memoryd.services.runtime.replay import ReplayReport
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import Category, MemoryRemembered, Scope, TurnRecorded
from memoryd.shared.settings import Settings

WORDS = [
    "trip",
    "budget",
    "hotel",
    "train",
    "coffee",
    "tea",
    "hiking",
    "jazz",
    "guitar",
    "python",
    "garden",
    "sister",
    "birthday",
    "dentist",
    "lisbon",
    "kyoto",
    "recipe",
    "marathon",
    "novel",
    "museum",
    "cat",
    "dog",
    "piano",
    "chess",
    "salary",
    "project",
]


RECALL_COMPONENTS: tuple[Component, ...] = ("memories", "indexer", "graph", "recall")
USERS = 100


def _sentence(rng: random.Random, n: int = 10) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_turns(users: list[Scope], count: int, rng: random.Random) -> list[TurnRecorded]:
    """Return ``count`` turns spread round-robin over ``users``."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        TurnRecorded(
            occurred_at=start + timedelta(seconds=i),
            scope=users[i % len(users)],
            query=_sentence(rng),
            response=_sentence(rng, 20),
        )
        for i in range(count)
    ]


def make_memories(users: list[Scope], count: int, rng: random.Random) -> list[MemoryRemembered]:
    """Return ``count`` explicit memories spread over ``users``."""
    import uuid

    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        MemoryRemembered(
            occurred_at=start + timedelta(seconds=i),
            scope=users[i % len(users)],
            memory_id=uuid.uuid4(),
            content=_sentence(rng, 12),
            category=Category.CORE,
            importance=rng.random(),
        )
        for i in range(count)
    ]


def percentile(values: list[float], q: float) -> float:
    """Return the q-th percentile (0..100) of ``values``."""
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def _append(
    client: MemoryClient, events: list[Any], progress: Progress, task: str, chunk: int = 2_000
) -> float:
    started = time.perf_counter()
    for i in range(0, len(events), chunk):
        await client.publish_many(events[i : i + chunk])
        progress(task, min(i + chunk, len(events)), len(events))
    return time.perf_counter() - started


async def _recall_latencies(
    client: MemoryClient,
    users: list[Scope],
    total: int,
    concurrency: int,
    rng: random.Random,
    *,
    progress: Progress,
) -> list[float]:
    latencies: list[float] = []
    per_caller = total // concurrency

    async def caller(seed: int) -> None:
        local = random.Random(seed)
        for _ in range(per_caller):
            scope = local.choice(users)
            started = time.perf_counter()
            await client.recall(scope, _sentence(local, 4))
            latencies.append((time.perf_counter() - started) * 1000)
            progress("recalls", len(latencies), per_caller * concurrency)

    await asyncio.gather(*(caller(rng.randrange(1 << 30)) for _ in range(concurrency)))
    return latencies


async def run_pipeline_bench(
    base: Settings,
    events: int,
    recalls: int,
    concurrency: int,
    out: Path,
    *,
    progress: Progress = quiet,
) -> dict[str, Any]:
    """Run the benchmark, write the figures to ``out``/pipeline.{json,md}, and return them.

    ``progress`` is told how each phase goes (appends, workers applying, recalls, replay).
    """
    rng = random.Random(7)
    async with embedded_nats("memoryd-bench-") as (data_dir, url):
        settings = on_embedded(base, data_dir, url)
        results = await _measure(settings, Load(events, recalls, concurrency), rng, progress)
    results.update(await measure_memoryos(base, progress=progress))
    _write(results, out)
    return results


@dataclass(frozen=True)
class Load:
    """How much the run does: turns appended, recalls asked, and by how many callers."""

    events: int
    recalls: int
    concurrency: int


def on_embedded(base: Settings, data_dir: Path, nats_url: str) -> Settings:
    """Return ``base`` on an embedded nats-server and SQLite in ``data_dir``."""
    return base.model_copy(
        update={"data_dir": data_dir, "nats_url": nats_url, "database_url": None}
    )


@dataclass(frozen=True)
class Applied:
    """How long the workers took to apply the log, and recall's latencies after (ms)."""

    stm_s: float
    index_s: float
    latencies: list[float]
    concurrency: int


async def _measure(
    settings: Settings, load: Load, rng: random.Random, progress: Progress
) -> dict[str, Any]:
    users = [Scope(tenant="bench", user_id=f"user-{i}") for i in range(USERS)]
    turns = make_turns(users, load.events, rng)
    memories = make_memories(users, max(1, load.events // 10), rng)
    admin, client = await _connect(settings)
    append_s = await _append(client, turns, progress, "append turns")
    await _append(client, memories, progress, "append memories")
    applied = await _apply_and_recall(settings, client, users, rng, load, progress=progress)
    replayed = await admin.replay(("stm", "memories", "indexer", "graph"), progress=progress)
    await client.close()
    await admin.stop()
    return pipeline_figures(load.events, len(memories), append_s, applied, replayed)


async def _connect(settings: Settings) -> tuple[Stack, MemoryClient]:
    """Start a stack without workers (the log and SQL) and connect a client to it."""
    admin = await start_stack(settings, components=())
    return admin, await MemoryClient.connect(admin.nats_url, settings.stream_name)


async def _apply_and_recall(
    settings: Settings,
    client: MemoryClient,
    users: list[Scope],
    rng: random.Random,
    load: Load,
    *,
    progress: Progress,
) -> Applied:
    """Time STM, then the recall path, applying the log; then time recalls against them."""
    stm, stm_s = await _caught_up(settings, client, ("stm",), 600, progress)
    # Recall as deployed: explicit memories, the hybrid index (BM25 + MiniLM) and the graph.
    rest, index_s = await _caught_up(settings, client, RECALL_COMPONENTS, 3_600, progress)
    await client.recall(users[0], "warm up", timeout=300)  # loads the model for queries
    latencies = await _recall_latencies(
        client, users, load.recalls, load.concurrency, rng, progress=progress
    )
    await stm.stop()
    await rest.stop()
    return Applied(stm_s, index_s, latencies, load.concurrency)


async def _caught_up(
    settings: Settings,
    client: MemoryClient,
    components: Sequence[Component],
    timeout: float,
    progress: Progress,
) -> tuple[Stack, float]:
    """Start the components' workers; return them and the seconds they took to apply the log."""
    workers = await start_stack(settings, components=components)
    consumers = list(workers.runners)
    started = time.perf_counter()
    task = f"apply: {', '.join(components)}"
    async with watching_consumers(
        client._js, settings.stream_name, consumers, task=task, progress=progress
    ):
        await client.wait_until_applied(timeout=timeout, consumers=consumers)
    return workers, time.perf_counter() - started


def pipeline_figures(
    events: int, memories: int, append_s: float, applied: Applied, replayed: ReplayReport
) -> dict[str, Any]:
    """Return the figures of a run: rates per second, recall latency percentiles, the machine."""
    latencies = applied.latencies
    return {
        "benchmark": "pipeline",
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()} {platform.python_version()}, {os.cpu_count()} cpus",
        "events": events,
        "memories": memories,
        "users": USERS,
        "log_append_events_per_s": round(events / append_s),
        "stm_apply_events_per_s": round(events / applied.stm_s),
        "memories_index_graph_apply_events_per_s": round((events + memories) / applied.index_s),
        "replay_events": replayed.events,
        "replay_events_per_s": round(replayed.events_per_second),
        "recall_requests": len(latencies),
        "recall_concurrency": applied.concurrency,
        "recall_p50_ms": round(percentile(latencies, 50), 2),
        "recall_p99_ms": round(percentile(latencies, 99), 2),
    }


def _write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "pipeline.json").write_text(json.dumps(results, indent=2) + "\n")
    rows = "\n".join(f"| {key} | {value} |" for key, value in results.items())
    (out / "pipeline.md").write_text(
        "# memoryd bench pipeline\n\nCommand: `memoryd bench pipeline`\n\n"
        f"| figure | value |\n|---|---|\n{rows}\n"
    )


# Turns/s through the MemoryOS tiers next to the embedder's own throughput.
MEMORYOS_COMPONENTS: tuple[Component, ...] = ("stm", "chain", "mtm", "persona")
LOCOMO = Path(__file__).resolve().parents[2].parent / "shared" / "bench" / "locomo_dev.json"


def chat_turns(count: int, rng: random.Random) -> list[tuple[str, str]]:
    """Return ``count`` (query, response) pairs: LoCoMo dialogue when present, else words."""
    from memoryd.shared.adapters.embeddings.throughput import locomo_turns

    try:
        texts = locomo_turns(LOCOMO, 2 * count)
    except (OSError, ValueError):
        texts = [_sentence(rng, 12) for _ in range(2 * count)]
    return list(zip(texts[::2], texts[1::2], strict=True))


async def measure_memoryos(
    base: Settings, turns: int = 400, users: int = 20, seed: int = 11, *, progress: Progress = quiet
) -> dict[str, Any]:
    """Time turns through STM, meta chain, MTM and persona (offline extractor, MiniLM).

    The turns are appended first; the clock runs from starting the workers to every tier
    worker settled. The embedder's own throughput is timed on the page texts MTM embeds.
    """
    from memoryd.shared.adapters.embeddings import SentenceTransformerEmbedder

    pairs = chat_turns(turns, random.Random(seed))
    model = SentenceTransformerEmbedder()
    embedder_rate = await _embedder_rate(model, pairs)  # also loads the model untimed
    async with embedded_nats("memoryd-bench-tiers-") as (data_dir, url):
        settings = on_embedded(base, data_dir, url)
        seconds = await _tiers_seconds(settings, tier_turns(pairs, users), model, progress)
    rate = turns / seconds
    return {
        "memoryos_turns": turns,
        "memoryos_users": users,
        "memoryos_pipeline_turns_per_s": round(rate, 1),
        "memoryos_embedder_texts_per_s": round(embedder_rate, 1),
        "memoryos_pipeline_vs_embedder": round(rate / embedder_rate, 3),
    }


def tier_turns(pairs: list[tuple[str, str]], users: int) -> list[TurnRecorded]:
    """Return a turn a minute per (query, response) pair, spread round-robin over ``users``."""
    scopes = [Scope(tenant="bench", user_id=f"tiers-{i}") for i in range(users)]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        TurnRecorded(
            occurred_at=start + timedelta(minutes=i),
            scope=scopes[i % users],
            query=query,
            response=response,
        )
        for i, (query, response) in enumerate(pairs)
    ]


async def _embedder_rate(model: Embedder, pairs: list[tuple[str, str]]) -> float:
    """Return the model's texts per second on the page texts MTM embeds."""
    from memoryd.services.mtm.projection import page_text
    from memoryd.shared.adapters.embeddings.throughput import measure_throughput

    return await measure_throughput(
        model, [page_text(query, response) for query, response in pairs]
    )


async def _tiers_seconds(
    settings: Settings, turns: list[TurnRecorded], model: Embedder, progress: Progress
) -> float:
    """Append the turns; return the seconds from starting the tier workers to all settled."""
    admin, client = await _connect(settings)
    await _append(client, turns, progress, "append MemoryOS turns")
    started = time.perf_counter()
    workers = await start_stack(settings, MEMORYOS_COMPONENTS, embedder=model)
    consumers = list(workers.runners)
    task = "apply: MemoryOS tiers"
    async with watching_consumers(
        client._js, settings.stream_name, consumers, task=task, progress=progress
    ):
        await client.wait_until_applied(timeout=1_800, consumers=consumers)
    seconds = time.perf_counter() - started
    await workers.stop()
    await client.close()
    await admin.stop()
    return seconds
