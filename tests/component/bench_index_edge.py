"""Measure the Edge index: upsert throughput and search latency under concurrent callers.

Not a test (pytest does not collect it): run it by hand, e.g.

    python tests/component/bench_index_edge.py --points 100000 [--keep | --reuse FOLDER]

Texts are real chat turns from LongMemEval-S dev (../shared/bench), cycled; vectors are random
384-d unit vectors; payloads spread over 10 tenants x 100 users. Each search is scoped to one
tenant and user. Searches are timed with the shard in this process (the event loop waits for
each) and in the index host (a child process, `edge_host`).
"""

import argparse
import asyncio
import gzip
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from uuid import uuid4

import numpy as np

from memoryd.shared.adapters.index import (
    EdgeSearchIndex,
    Hit,
    IndexPayload,
    IndexPoint,
    Kind,
    ScopeFilter,
)

_BENCH_TEXTS = (
    Path(__file__).resolve().parents[3] / "shared" / "bench" / "longmemeval_s_dev.json.gz"
)
_KINDS: tuple[Kind, ...] = ("turn", "turn", "turn", "page", "segment", "fact", "memory")


def load_texts(path: Path) -> list[str]:
    """Return every distinct chat turn of the LongMemEval-S dev file."""
    with gzip.open(path, "rt", encoding="utf-8") as file:
        questions = json.load(file)
    turns = {
        turn["content"]
        for question in questions
        for session in question["haystack_sessions"]
        for turn in session
    }
    return sorted(turns)


def make_points(
    count: int, dim: int, texts: list[str], rng: np.random.Generator
) -> list[IndexPoint]:
    """Return points with random unit vectors, real texts and a realistic payload spread."""
    vectors = rng.standard_normal((count, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    points = []
    for i in range(count):
        payload = IndexPayload(
            tenant=f"t{i % 10}",
            user_id=f"u{(i // 10) % 100}",
            agent_id=f"a{i % 3}",
            session_id=f"s{i // 50}",
            namespace="default",
            kind=_KINDS[i % len(_KINDS)],
            category="conversation",
            memory_type="episodic",
            importance=float(rng.random()),
            occurred_at=1.7e9 + float(rng.random()) * 3.15e7,
            turn_id=f"turn-{i}",
            source_event_id=uuid4(),
        )
        points.append(
            IndexPoint(id=uuid4(), dense=vectors[i], text=texts[i % len(texts)], payload=payload)
        )
    return points


def percentile(latencies: list[float], q: float) -> float:
    """Return the q-th percentile of latencies, in milliseconds."""
    return float(np.percentile(latencies, q)) * 1000


async def timed_callers(
    calls: list[Callable[[], Awaitable[list[Hit]]]], concurrency: int
) -> tuple[list[float], float]:
    """Run the calls from `concurrency` concurrent callers; return latencies and wall time."""
    latencies: list[float] = []

    async def caller(share: list[Callable[[], Awaitable[list[Hit]]]]) -> None:
        for call in share:
            started = time.perf_counter()
            # Yield first, as a caller woken by network I/O would: a direct (blocking) search
            # then waits for the searches of the callers ahead of it, and that wait is counted.
            await asyncio.sleep(0)
            await call()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(caller(calls[k::concurrency]) for k in range(concurrency)))
    return latencies, time.perf_counter() - started


def search_calls(
    index: EdgeSearchIndex,
    kind: str,
    count: int,
    dim: int,
    *,
    texts: list[str],
    rng: np.random.Generator,
) -> list[Callable[[], Awaitable[list[Hit]]]]:
    """Return `count` scoped searches of one stream, ready to call."""
    calls: list[Callable[[], Awaitable[list[Hit]]]] = []
    for _ in range(count):
        scope = ScopeFilter(tenant=f"t{rng.integers(10)}", user_id=f"u{rng.integers(100)}")
        if kind == "dense":
            vector = rng.standard_normal(dim).astype(np.float32)
            calls.append(partial(index.search_dense, vector, scope, 10))
        else:
            words = texts[int(rng.integers(len(texts)))].split()
            start = int(rng.integers(max(1, len(words) - 4)))
            query = " ".join(words[start : start + 4])
            calls.append(partial(index.search_sparse, query, scope, 10))
    return calls


def report(label: str, latencies: list[float], wall: float) -> None:
    """Print one latency line."""
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    mean = statistics.fmean(latencies) * 1000
    rate = len(latencies) / wall
    print(f"{label:<34} p50 {p50:6.2f} ms  p99 {p99:6.2f} ms  mean {mean:6.2f} ms  {rate:6.0f}/s")


async def load(folder: Path, args: argparse.Namespace, texts: list[str]) -> None:
    """Build the index in the folder: upsert every point, then optimise; print the timings."""
    points = make_points(args.points, args.dim, texts, np.random.default_rng(args.seed))
    index = EdgeSearchIndex(folder, args.dim)
    await index.ensure_collection()
    started = time.perf_counter()
    for start in range(0, len(points), args.batch):
        await index.upsert(points[start : start + args.batch])
    seconds = time.perf_counter() - started
    print(
        f"upsert {len(points)} points ({len(texts)} distinct texts), batches of {args.batch}: "
        f"{seconds:.1f} s = {len(points) / seconds:.0f} points/s"
    )
    rng = np.random.default_rng(args.seed + 1)
    latencies, wall = await timed_callers(
        search_calls(index, "dense", 80, args.dim, texts=texts, rng=rng), 8
    )
    report("dense, before optimize", latencies, wall)
    started = time.perf_counter()
    await index.optimize()
    print(f"optimize: {time.perf_counter() - started:.1f} s")
    await index.close()


async def search(folder: Path, args: argparse.Namespace, texts: list[str]) -> None:
    """Time dense and BM25 searches from concurrent callers, in this process and hosted."""
    rng = np.random.default_rng(args.seed + 2)
    for hosted in (False, True):
        mode = "hosted" if hosted else "inline"
        index = EdgeSearchIndex(folder, args.dim, hosted=hosted)
        await index.ensure_collection()
        for kind in ("dense", "sparse"):
            calls = search_calls(index, kind, args.warmup, args.dim, texts=texts, rng=rng)
            await timed_callers(calls, args.concurrency)
            calls = search_calls(index, kind, args.queries, args.dim, texts=texts, rng=rng)
            latencies, wall = await timed_callers(calls, args.concurrency)
            report(f"{kind}, {args.concurrency} callers, {mode}", latencies, wall)
        await index.close()


async def run(args: argparse.Namespace) -> None:
    """Build the index (unless reusing one), then time searches; remove it unless kept."""
    print(f"load average before: {os.getloadavg()}")
    texts = load_texts(args.texts)
    folder = args.reuse or Path(tempfile.mkdtemp(prefix="edge-bench-"))
    try:
        if args.reuse is None:
            await load(folder, args, texts)
        await search(folder, args, texts)
    finally:
        if args.keep or args.reuse:
            print(f"index kept in {folder}")
        else:
            shutil.rmtree(folder)
    print(f"load average after: {os.getloadavg()}")


def main() -> None:
    """Parse the options and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--texts", type=Path, default=_BENCH_TEXTS)
    parser.add_argument("--keep", action="store_true", help="keep the built index folder")
    parser.add_argument("--reuse", type=Path, help="time searches on an index built with --keep")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
