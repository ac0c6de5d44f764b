"""``memoryd bench retrieval``: LongMemEval-S and LoCoMo recall through the running pipeline.

Each dataset is ingested through the public client exactly as a live app would: one
``turn.recorded`` event per dialogue turn, in order, dated by its session, in one user scope
per LongMemEval question and per LoCoMo conversation. The bench waits until the indexer and
graph workers have applied everything, then asks the recall service (request-reply) once per
question and system: BM25 alone, dense alone, and the fused three streams. Embeddings are
cached in a SQL file under ``bench/cache`` so a second run does not run the model again.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import platform
import re
import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import structlog

from memoryd.services.bench.datasets import (
    BenchDataset,
    Conversation,
    Question,
    Subset,
    Turn,
    load_locomo,
    load_longmemeval,
    turn_sessions,
)
from memoryd.services.bench.embedded import embedded_nats
from memoryd.services.bench.metrics import Evaluation, evaluate
from memoryd.services.bench.report import BenchReport, write_report
from memoryd.services.bootstrap import Component, Stack, build_model, start_stack
from memoryd.services.recall.hybrid import STREAMS
from memoryd.services.runtime.progress import Progress, quiet, watching_consumers
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import CachedEmbedder, SqlEmbeddingStore
from memoryd.shared.adapters.sql.engine import create_engine
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts.events import TurnRecorded
from memoryd.shared.contracts.recall import RecallRequest, StreamWeights
from memoryd.shared.contracts.scope import Scope, SearchScope
from memoryd.shared.settings import Settings

log = structlog.get_logger(__name__)

DATASETS = ("longmemeval", "locomo")
# Each stream alone, the two index streams, and "fused": the service's configured weights
# (MEMORYD_WEIGHT_BM25 / _DENSE / _GRAPH), so the last column is what a deployment gets.
SYSTEMS: Mapping[str, StreamWeights | None] = {
    "bm25": StreamWeights(bm25=1.0, dense=0.0, graph=0.0),
    "dense": StreamWeights(bm25=0.0, dense=1.0, graph=0.0),
    "bm25+dense": StreamWeights(bm25=1.0, dense=1.0, graph=0.0),
    "fused": None,
}
TARGETS: Mapping[str, Mapping[str, float]] = {
    "longmemeval": {
        "session.recall_all@5": 0.95,
        "session.recall_any@5": 0.99,
        "session.ndcg_any@10": 0.95,
    },
    "locomo": {"session.recall_all@5": 0.90, "turn.recall_all@10": 0.75},
}
# The workers a benchmark needs: the retrieval path only (the MemoryOS tiers are measured
# by their own benchmark), so ingest time is the indexer's and the graph's.
COMPONENTS: tuple[Component, ...] = ("indexer", "graph", "recall")
CONSUMERS = (subjects.INDEXER_CONSUMER, subjects.GRAPH_CONSUMER)
RECALL_LIMIT = 50
BENCH_NAMESPACE = uuid.UUID("0b6c1d7e-5f0a-4a8e-9a3b-6d2f7c1e9b42")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class BenchOptions:
    """What to run and where to read and write."""

    data_dir: Path = Path("../shared/bench")
    out: Path = Path("bench/results")
    cache: Path = Path("bench/cache/embeddings.db")
    datasets: tuple[str, ...] = DATASETS
    subset: int | None = None
    rrf_k: int = 10
    max_per_session: int = 10
    concurrency: int = 4
    # How many keys each stream hands to fusion (None: the service's MEMORYD_STREAM_CANDIDATES).
    candidates: int | None = None
    # Rank sessions as recall ranks them (its per-session aggregation); False: by first turn.
    session_ranking: bool = True
    # Also write every question's rankings (one JSON line per question and system).
    dump: bool = False


@dataclass
class Ingested:
    """A dataset as the pipeline holds it: event ids back to dataset turn ids, and scopes."""

    turn_of_event: dict[str, str] = field(default_factory=dict)
    session_of_token: dict[str, str] = field(default_factory=dict)
    scopes: dict[str, Scope] = field(default_factory=dict)
    events: int = 0


def token(text: str) -> str:
    """Return a scope token for a dataset id (hashed when it is not already safe)."""
    if len(text) <= 64 and not _UNSAFE.search(text):
        return text
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def turn_event(
    scope: Scope, turn: Turn, session_date: Any, position: int, speaker: bool
) -> TurnRecorded:
    """Record one dialogue turn: the user's words as the query, the other side's as response.

    The event's id is the turn's place in the dataset (not a random one), so every run writes
    the same index points under the same ids, and equal scores rank alike from run to run.
    """
    text = f"{turn.speaker}: {turn.text}" if speaker else turn.text
    user_side = turn.role == "user"
    place = f"{scope.tenant}/{scope.user_id}/{scope.session_id}/{position}"
    return TurnRecorded(
        event_id=uuid.uuid5(BENCH_NAMESPACE, place),
        occurred_at=session_date + timedelta(seconds=position),
        scope=scope,
        query=text if user_side else "",
        response="" if user_side else text,
    )


def conversation_events(
    tenant: str, conversation: Conversation, speaker: bool
) -> tuple[Scope, list[TurnRecorded], dict[str, str]]:
    """Return a conversation's scope, its turn events in order, and event id -> turn id."""
    user = token(conversation.id)
    events: list[TurnRecorded] = []
    mapping: dict[str, str] = {}
    for session in conversation.sessions:
        scope = Scope(tenant=tenant, user_id=user, session_id=token(session.id))
        for position, turn in enumerate(session.turns):
            if not turn.text.strip():
                continue
            event = turn_event(scope, turn, session.date, position, speaker)
            events.append(event)
            mapping[str(event.event_id)] = turn.id
    return Scope(tenant=tenant, user_id=user), events, mapping


def load(name: str, options: BenchOptions) -> BenchDataset:
    """Load one dataset (a subset: its first N questions or conversations)."""
    subset: Subset = options.subset
    if name == "longmemeval":
        return load_longmemeval(options.data_dir / "longmemeval_s_dev.json.gz", subset)
    return load_locomo(options.data_dir / "locomo_dev.json", subset)


async def ingest(
    client: MemoryClient, name: str, dataset: BenchDataset, progress: Progress = quiet
) -> Ingested:
    """Publish every conversation's turns; LoCoMo turns carry their speaker's name."""
    ingested = Ingested()
    for done, conversation in enumerate(dataset.conversations, 1):
        scope, events, mapping = conversation_events(name, conversation, name == "locomo")
        for start in range(0, len(events), 2_000):
            await client.publish_many(events[start : start + 2_000])
        ingested.turn_of_event |= mapping
        ingested.session_of_token |= {token(s.id): s.id for s in conversation.sessions}
        ingested.scopes[conversation.id] = scope
        ingested.events += len(events)
        progress(f"{name}: ingest conversations", done, len(dataset.conversations))
    return ingested


@dataclass
class SystemRun:
    """One system's answers: its evaluation, the other session ranking's, and the rankings."""

    evaluation: Evaluation
    other: Evaluation
    latencies: list[float]
    turns: dict[str, list[str]]
    sessions: dict[str, list[str]]


@dataclass(frozen=True)
class Ranked:
    """One recall's answer in dataset ids: turns and sessions best first, and its latency."""

    turns: list[str]
    sessions: list[str]
    seconds: float


def recall_request(
    scope: Scope, question: Question, weights: StreamWeights | None, options: BenchOptions
) -> RecallRequest:
    """Return the recall a question asks: the user's items only, no pages, a wide budget.

    A question that has a date (LongMemEval's) is asked as of that date, as an agent would
    ask it then; LoCoMo's questions have none, so recall reckons from its own clock.
    """
    return RecallRequest(
        scope=scope,
        query=question.text,
        search_scope=SearchScope.USER,
        limit=RECALL_LIMIT,
        max_tokens=200_000,
        include_pages=False,
        weights=weights,
        rrf_k=options.rrf_k,
        max_per_session=options.max_per_session,
        as_of=question.asked_at,
    )


async def rank(
    client: MemoryClient,
    scope: Scope,
    question: Question,
    weights: StreamWeights | None,
    *,
    options: BenchOptions,
    ingested: Ingested,
) -> Ranked:
    """Recall through request-reply; return the ranked dataset turn and session ids."""
    request = recall_request(scope, question, weights, options)
    started = time.perf_counter()
    response = await client.recall_raw(
        request.scope.tenant, request.model_dump_json().encode(), timeout=60.0
    )
    seconds = time.perf_counter() - started
    turns = [ingested.turn_of_event[item.turn_id] for item in response.items if item.turn_id]
    sessions = [ingested.session_of_token[hit.session_id] for hit in response.sessions]
    return Ranked([turn for turn in turns if turn], sessions, seconds)


async def run_system(
    client: MemoryClient,
    dataset: BenchDataset,
    ingested: Ingested,
    weights: StreamWeights | None,
    options: BenchOptions,
    *,
    task: str = "questions",
    progress: Progress = quiet,
) -> SystemRun:
    """Ask every question with one system's weights; return its evaluation and rankings.

    The second evaluation ranks sessions the other way (by first turn instead of recall's
    session ranking, or the reverse), so the report shows what the aggregation is worth.
    """
    gate = asyncio.Semaphore(options.concurrency)
    answered: list[Ranked] = []

    async def ask(question: Question) -> Ranked:
        scope = ingested.scopes[question.conversation_id]
        async with gate:
            found = await rank(client, scope, question, weights, options=options, ingested=ingested)
        answered.append(found)
        progress(task, len(answered), len(dataset.questions))
        return found

    answers = await asyncio.gather(*(ask(question) for question in dataset.questions))
    return system_run(dataset, answers, options.session_ranking)


def system_run(
    dataset: BenchDataset, answers: Sequence[Ranked], session_ranking: bool
) -> SystemRun:
    """Evaluate a system's answers (one per question, in order) with both session rankings."""
    ids = [question.id for question in dataset.questions]
    turns = {qid: answer.turns for qid, answer in zip(ids, answers, strict=True)}
    sessions = {qid: answer.sessions for qid, answer in zip(ids, answers, strict=True)}
    session_maps = {c.id: turn_sessions(c) for c in dataset.conversations}
    chosen, other = (sessions, None) if session_ranking else (None, sessions)
    evaluation = evaluate(dataset.questions, turns, session_maps, sessions=chosen)
    other_evaluation = evaluate(dataset.questions, turns, session_maps, sessions=other)
    latencies = [answer.seconds for answer in answers]
    return SystemRun(evaluation, other_evaluation, latencies, turns, sessions)


async def settled(client: MemoryClient, timeout: float = 3_600.0) -> None:
    """Wait until the indexer and graph have applied everything, riding out slow replies.

    While the workers fold a large batch (in this same process) a consumer-info request can
    miss its own few-second deadline; that is no reason to abandon an hour-long wait.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            await client.wait_until_applied(timeout=timeout, consumers=CONSUMERS)
            return
        except TimeoutError:  # nats-py raises the built-in one or its own subclass
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)


def _ms(values: Sequence[float], q: int) -> float:
    if len(values) < 2:
        return round(values[0] * 1000, 1) if values else 0.0
    return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1] * 1000, 1)


async def bench_dataset(
    client: MemoryClient,
    stack_ready: Any,
    name: str,
    options: BenchOptions,
    *,
    fused_weights: str,
    candidates: int,
    progress: Progress = quiet,
) -> BenchReport:
    """Ingest one dataset, wait until it is indexed, and score every system on it."""
    dataset = load(name, options)
    ingested, ingest_s = await _ingest_and_settle(client, name, dataset, stack_ready, progress)
    notes = dataset_notes(
        name, options, ingested, ingest_s, fused_weights=fused_weights, candidates=candidates
    )
    systems: dict[str, Evaluation] = {}
    dumped: list[dict[str, Any]] = []
    for system, weights in SYSTEMS.items():
        task = f"{name}: {system} questions"
        run = await run_system(
            client, dataset, ingested, weights, options, task=task, progress=progress
        )
        systems[system] = run.evaluation
        if options.dump:
            dumped.extend(question_rows(dataset, system, run))
        notes |= system_notes(system, run)
        log.info("bench_system_done", dataset=name, system=system)
    if dumped:
        _write_rows(dumped, options.out / f"{report_stem(name, options)}_questions.jsonl")
    return BenchReport(dataset=name, systems=systems, targets=dict(TARGETS[name]), notes=notes)


async def _ingest_and_settle(
    client: MemoryClient, name: str, dataset: BenchDataset, stack_ready: Any, progress: Progress
) -> tuple[Ingested, float]:
    """Ingest a dataset and wait until the stack is ready; return it and the seconds taken."""
    started = time.perf_counter()
    ingested = await ingest(client, name, dataset, progress)
    stream, task = client._stream, f"{name}: index and graph"
    async with watching_consumers(client._js, stream, CONSUMERS, task=task, progress=progress):
        await settled(client)
    await stack_ready()
    return ingested, time.perf_counter() - started


def dataset_notes(
    name: str,
    options: BenchOptions,
    ingested: Ingested,
    ingest_s: float,
    *,
    fused_weights: str,
    candidates: int,
) -> dict[str, str]:
    """Return a report's notes on the run: ingest rate, recall's knobs, the machine."""
    return {
        "events": str(ingested.events),
        "ingest_seconds": f"{ingest_s:.1f}",
        "ingest_events_per_s": f"{ingested.events / ingest_s:.0f}",
        "rrf_k": str(options.rrf_k),
        "stream_candidates": str(candidates),
        "max_per_session": str(options.max_per_session),
        "session_ranking": "recall's sessions" if options.session_ranking else "first turn",
        "agent_side_facts": str(name in TWO_PEOPLE),
        "machine": f"{platform.machine()} {platform.python_version()}",
        "fused_weights": fused_weights,
    }


def system_notes(system: str, run: SystemRun) -> dict[str, str]:
    """Return a report's notes on one system: the other session ranking, query latencies."""
    means = run.other.overall.means
    other = " / ".join(
        f"{key} {means[key]:.3f}"
        for key in ("session.recall_all@5", "session.recall_any@5", "session.ndcg_any@10")
        if key in means
    )
    return {
        f"{system}_other_session_ranking": other,
        f"{system}_query_ms_p50": str(_ms(run.latencies, 50)),
        f"{system}_query_ms_p99": str(_ms(run.latencies, 99)),
    }


def _write_rows(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def question_rows(dataset: BenchDataset, system: str, run: SystemRun) -> list[dict[str, Any]]:
    """Return one row per question: what it asked, what was relevant, what came back."""
    return [
        {
            "system": system,
            "question_id": question.id,
            "group": question.type_or_category,
            "question": question.text,
            "answer_sessions": list(question.answer_session_ids),
            "answer_turns": list(question.answer_turn_ids),
            "sessions": run.sessions.get(question.id, [])[:10],
            "turns": run.turns.get(question.id, [])[:20],
        }
        for question in dataset.questions
        if not question.abstention
    ]


def report_stem(name: str, options: BenchOptions) -> str:
    """Name a dataset's report files: ``retrieval_<dataset>[_subset<N>]``."""
    return f"retrieval_{name}" + (f"_subset{options.subset}" if options.subset else "")


# Datasets whose "agent" side is a person too (LoCoMo: two friends chatting), so what that
# side says in the first person is a fact about someone, not an assistant's "I can help".
TWO_PEOPLE = frozenset({"locomo"})


def bench_settings(
    base: Settings,
    data_dir: Path,
    nats_url: str,
    dataset: str = "",
    candidates: int | None = None,
) -> Settings:
    """Return settings for a bench stack: pure relevance (no decay, recency or importance).

    The datasets are years old and every turn has the same importance, so decay and recency
    would only reorder by date, which the questions do not ask for.
    """
    return base.model_copy(
        update={
            "index_agent_facts": dataset in TWO_PEOPLE,
            "data_dir": data_dir,
            "nats_url": nats_url,
            "database_url": None,
            "decay_per_hour": 0.0,
            "score_importance": 0.0,
            "score_recency": 0.0,
            "stream_candidates": candidates or base.stream_candidates,
            "batch_size": 512,
            # The HNSW built at the same points every run (an optimisation in the background
            # would cut segments where the timing falls), and once more at the end.
            "index_optimize_in_background": False,
        }
    )


async def run_retrieval_bench(
    base: Settings, options: BenchOptions, *, progress: Progress = quiet
) -> list[BenchReport]:
    """Run the benchmark on each dataset in a fresh embedded stack; write the reports.

    ``progress`` is told how ingesting, indexing and each system's questions go.
    """
    cache_engine = create_engine(f"sqlite+aiosqlite:///{options.cache.resolve()}")
    options.cache.parent.mkdir(parents=True, exist_ok=True)
    store = SqlEmbeddingStore(cache_engine)
    await store.create_schema()
    reports = []
    try:
        for name in options.datasets:
            reports.append(await _one(base, options, store, name, progress))
    finally:
        await cache_engine.dispose()
    return reports


async def _one(
    base: Settings, options: BenchOptions, store: SqlEmbeddingStore, name: str, progress: Progress
) -> BenchReport:
    async with embedded_nats("memoryd-bench-") as (data_dir, url):
        settings = bench_settings(base, data_dir, url, name, options.candidates)
        report = await _bench_on_stack(settings, options, store, name, progress)
    stem = report_stem(name, options)
    write_report(report, options.out / f"{stem}.json", options.out / f"{stem}.md")
    return report


async def _bench_on_stack(
    settings: Settings,
    options: BenchOptions,
    store: SqlEmbeddingStore,
    name: str,
    progress: Progress,
) -> BenchReport:
    """Start the bench stack (embeddings through the cache) and bench one dataset on it."""
    model = CachedEmbedder(build_model(settings), store, batch_size=512)
    stack = await start_stack(settings, COMPONENTS, embedder=model)
    client = await MemoryClient.connect(stack.nats_url, settings.stream_name)
    try:
        return await bench_dataset(
            client,
            functools.partial(optimise_index, stack),
            name,
            options,
            fused_weights=weights_note(settings),
            candidates=settings.stream_candidates,
            progress=progress,
        )
    finally:
        await client.close()
        await stack.stop()


async def optimise_index(stack: Stack) -> None:
    """Build the HNSW and merge segments: the bulk load is done, as the issue asks."""
    if stack.retrieval is not None:
        await stack.retrieval.index.optimize()


def weights_note(settings: Settings) -> str:
    """Describe the service's own stream weights (the "fused" system's)."""
    return " / ".join(f"{stream} {getattr(settings, f'weight_{stream}')}" for stream in STREAMS)
