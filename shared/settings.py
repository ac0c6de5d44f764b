"""All configuration, from one pydantic-settings class (environment prefix MEMORYD_)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class StartupError(Exception):
    """memoryd cannot start as configured; the one-line message names the setting to change."""


def revealed(secret: SecretStr | None) -> str | None:
    """Return a secret's value, for the one client that sends it (None when unset)."""
    return secret.get_secret_value() if secret is not None else None


def url_password(url: str) -> str:
    """Return the password a URL (or a comma-separated list of them) carries, '' if none."""
    for part in url.split(","):
        password = urlsplit(part.strip()).password
        if password:
            return unquote(password)
    return ""


def public_url(url: str) -> str:
    """Return ``url`` (or a comma-separated list) without user and password, fit for a log."""
    parts = []
    for part in url.split(","):
        split = urlsplit(part.strip())
        if split.password is not None or split.username is not None:
            host = split.hostname or ""
            netloc = f"***@{host}" + (f":{split.port}" if split.port else "")
            split = split._replace(netloc=netloc)
        parts.append(urlunsplit(split))
    return ",".join(parts)


class Settings(BaseSettings):
    """memoryd settings; every field can be set as MEMORYD_<FIELD> in the environment."""

    model_config = SettingsConfigDict(env_prefix="MEMORYD_", frozen=True)

    # Where the embedded default keeps its state (JetStream files, SQLite database).
    data_dir: Path = Path(".memoryd")
    # An external NATS (production); unset means "spawn the embedded nats-server".
    nats_url: str | None = None
    embedded_nats_host: str = "127.0.0.1"
    embedded_nats_port: int = 14222
    # This process's NATS credentials (`memoryd tenants` makes them: the workers' service user
    # in data_dir/auth/service.env, a tenant's user when it is added). A tenant's app also
    # sets its tenant, which keeps its replies under the tenant's own inbox prefix.
    nats_user: str | None = None
    nats_password: SecretStr | None = None
    nats_tenant: str | None = None
    # The embedded nats-server's config file, e.g. the auth.conf `memoryd tenants` writes:
    # with it, the embedded server admits only the users the file names. Unset: it accepts
    # any client on its host (127.0.0.1 by default), and says so at start.
    embedded_nats_config: Path | None = None
    # Where `memoryd tenants` keeps its registry and writes the server config (default
    # data_dir/auth).
    auth_dir: Path | None = None
    # An external database (production: postgresql+asyncpg://...); unset means SQLite in data_dir.
    database_url: str | None = None
    # How long connecting to NATS may take before memoryd gives up with a one-line error.
    connect_timeout_seconds: float = Field(default=10.0, gt=0)
    # A publish whose acknowledgement is lost (NATS restarting, a reconnect) is sent again
    # with the same Nats-Msg-Id, so the stream stores it once: this many sends at most,
    # for at most this long in all, and each send waits this long for its acknowledgement.
    publish_attempts: int = Field(default=10, ge=1, le=1_000)
    publish_timeout_seconds: float = Field(default=30.0, gt=0)
    publish_ack_timeout_seconds: float = Field(default=2.0, gt=0)

    stream_name: str = "MEMORYD"
    stream_replicas: int = Field(default=1, ge=1, le=5)
    # Partitions of the log by user (1: none). With N > 1 each projection has a consumer per
    # partition, and replicas of a worker share the partitions (leases): a user's events stay
    # in one partition, applied in order. Fixed when the stream is created.
    partitions: int = Field(default=1, ge=1, le=256)
    # A replica's hold on a partition lapses this long after its last renewal (renewed every
    # third of it): a dead replica's partitions are taken over within about this long.
    lease_seconds: float = Field(default=6.0, ge=0.5)
    # This replica's name among its workers' replicas, unique and kept across restarts (as a
    # StatefulSet names its pods): a replica started again takes back at once the partitions
    # its previous run held, instead of waiting for their leases to lapse. Unset: a new
    # name per start.
    replica_name: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$"
    )
    duplicate_window_seconds: float = Field(default=300.0, gt=0)
    dead_letter_stream: str = "MEMORYD_DLQ"
    # Memory-updated notifications are kept in their own stream, so a subscriber that was
    # down, slow or reconnecting reads what it missed: kept this long and up to this size
    # (the oldest go first), whichever limit is reached first.
    notify_stream_name: str = "MEMORYD_NOTIFY"
    notify_max_age_seconds: float = Field(default=7 * 24 * 3_600.0, gt=0)
    notify_max_bytes: int = Field(default=1024**3, ge=1_024)

    stm_capacity: int = Field(default=7, ge=1, le=1000)
    batch_size: int = Field(default=256, ge=1, le=10_000)
    # How long an idle worker's fetch waits before asking again (it returns at once on a message).
    idle_poll_seconds: float = Field(default=5.0, gt=0)
    # A message whose processing fails this many times is parked in the dead-letter stream.
    max_attempts: int = Field(default=5, ge=1, le=100)
    ack_wait_seconds: float = Field(default=30.0, gt=0)
    daily_ttl_days: int = Field(default=30, ge=1)

    # --- hybrid retrieval (index, embeddings, graph, recall scoring, retention) ---
    # A Qdrant server (production); unset means Qdrant Edge in-process under data_dir/index.
    qdrant_url: str | None = None
    qdrant_api_key: SecretStr | None = None
    qdrant_collection: str = "memoryd"
    # Edge builds its HNSW only when optimised, in a child process on a copy of the index (Edge
    # holds the GIL while it optimises): after this many upserted points at most (sooner while
    # the index is small: once index_optimize_quiet_points are new and half as many as those
    # already in an HNSW), and after index_optimize_quiet_seconds without a write when
    # index_optimize_quiet_points are outside any HNSW. A dense search by brute force took
    # 1.4 ms at 12,620 points here, 0.4 ms on HNSW.
    index_optimize_every: int = Field(default=20_000, ge=1)
    # False: optimise in this process (the GIL held throughout), at every index_optimize_every
    # points exactly and never after a quiet spell: what a bulk load that optimises at its end
    # (bench retrieval) wants, the same index from run to run.
    index_optimize_in_background: bool = True
    index_optimize_quiet_points: int = Field(default=7_000, ge=1)
    index_optimize_quiet_seconds: float = Field(default=10.0, gt=0)
    # Searches hold the quiet spell's optimisation off, but no later than this after the last
    # write while most points are outside any HNSW: a scope searched without pause would
    # otherwise stay a scan. A smaller tail waits for a pause in searches.
    index_optimize_latest_seconds: float = Field(default=30.0, gt=0)
    # Edge segments stop growing at about this many points: an optimisation then indexes only
    # the new points (~3 s for 20,000 turns' points here) instead of rebuilding one segment of
    # everything (11 s at 61,000 points, growing), and Edge holds the GIL while it runs.
    # At least 10,000: Edge indexes a segment only past ~10,000 KB (~6,700 points of 384 floats).
    index_segment_points: int = Field(default=20_000, ge=10_000)
    # True: Edge reads a segment's whole payload file into memory when it opens it (32 MB a
    # segment however few points it holds); False (Edge's own default): maps it, and reads a
    # page when a point on it is asked for. On Edge 0.9 recall's payload reads take the same
    # time either way (40 by id: 0.43-0.46 ms at 10,000 turns, a page's first read included),
    # and False holds 49 MB less for a 10,000-turn shard, twice that while a new generation
    # loads; Edge 0.4 read them from disk 5-10x slower. Applied to the segments made after.
    index_payloads_in_ram: bool = False
    # Edge's shard in a child process of its own, the index host, asked over a socket: Edge
    # holds the GIL while it searches, so in the serving process each search stops its event
    # loop for as long as the engine works. False: in the serving process.
    index_hosted: bool = True
    embedding_kind: Literal["local", "openai"] = "local"
    embedding_model: str | None = None
    # How a local model runs its ONNX export: OpenVINO (bfloat16 where the CPU has it, ~1.8x
    # fp32's rate there at 0.99999 cosine to fp32; float32 elsewhere), ONNX Runtime (`onnx`: the
    # same vectors as torch), its int8 export (~2x, 0.993 cosine), or torch; `auto`: OpenVINO
    # where the CPU computes in bfloat16, ONNX Runtime elsewhere (as fast in fp32 on an AVX2
    # CPU, ~230 MB less). bfloat16's and int8's vectors are cached under names of their own;
    # points already in the index keep theirs until `memoryd replay` rebuilds it.
    embedding_runtime: Literal["auto", "openvino", "onnx", "onnx-int8", "torch"] = "auto"
    # Threads one worker-side model call uses (local runtimes but torch; unset: every core).
    embedding_threads: int | None = Field(default=None, ge=1)
    # Scheduling niceness of the workers' model lanes (Linux, ONNX Runtime): the event loop,
    # recall's query model and nats-server get the cores first while turns are embedded.
    embedding_nice: int = Field(default=10, ge=0, le=19)
    # Seconds without a text to embed after which the workers' model gives back its working
    # memory (OpenVINO's buffers for every batch shape it ran) and the C heap its free pages
    # (0: never): `memoryd up` at rest after 3,000 turns 461 against 495 MB; 126-188 MB with
    # the two models alone in a process (docs/performance.md, session 45).
    embedding_idle_seconds: float = Field(default=5.0, ge=0)
    # Seconds without a text to embed after which the workers' model is let go of, its
    # weights as the engine laid them out included (0: never); the next text loads it again
    # (0.3 s with its first batch). `memoryd up` at rest after 10,000 turns: see
    # docs/performance.md, session 48.
    embedding_unload_seconds: float = Field(default=30.0, ge=0)
    # Where ONNX exports of local models are kept (default ~/.cache/memoryd/models).
    model_cache_dir: Path | None = None
    embedding_base_url: str | None = None
    embedding_api_key: SecretStr | None = None
    # Recall keeps the vectors of recent query texts in memory (a repeated question skips the
    # model); workers' vectors go to the SQL cache instead, so replay needs no model.
    query_cache_entries: int = Field(default=10_000, ge=1)
    # Recall embeds at most this many tokens of a query (a local model; documents keep the
    # model's own limit, 256 for MiniLM, which was trained on 128). A pasted page of a query
    # took ~60 ms of the model on one thread at 256, ~28 ms at 128; BM25 and the graph still
    # read all of it. Every question of the retrieval benchmarks is under 60 tokens.
    query_max_tokens: int = Field(default=128, ge=8)
    # Threads that compute one call of recall's query model (not torch; unset: two, one on
    # a one-core machine). A lone question waited 5.4 ms on two threads, 7.5 ms on one here
    # (ONNX Runtime, fp32); OpenVINO's bfloat16 on two: 2.3 ms (12 tokens).
    query_threads: int | None = Field(default=None, ge=1)
    # How recall's query model runs (a local model; unset: as ``embedding_runtime``). The
    # documents keep theirs: `onnx-int8` here embeds a question in ~4.3 ms against ~7.1 (fp32,
    # this machine), its vectors at 0.994 mean cosine to fp32's, and the index is not rebuilt.
    query_embedding_runtime: Literal["auto", "openvino", "onnx", "onnx-int8", "torch"] | None = None
    # Recall appends the segments it visited as one event per user per this many seconds
    # (0: one event per recall, which then waits for the append).
    recall_visit_interval_seconds: float = Field(default=10.0, ge=0)
    # What recall keeps read between writes, every part of it in one bound: about seven
    # entries a user asked (segments, persona, graph, their pages, conversation, ...).
    recall_cache_entries: int = Field(default=1_000, ge=1)
    # Segments (all users') recall keeps decoded beside their stored text, so a user's reload
    # after a write decodes only the segments the write changed (~3.5 KB each).
    recall_decoded_segments: int = Field(default=20_000, ge=1)
    # Filed pages (all users') recall keeps decoded, by segment and page count, so a visit
    # (which moves a user's version, not their pages) reads none again.
    recall_held_pages: int = Field(default=10_000, ge=1)
    # Recall requests one service process answers at once (each mostly waits on I/O), and
    # how many more may wait for a worker; past both, a request is refused ``overloaded``.
    recall_concurrency: int = Field(default=16, ge=1)
    recall_backlog: int = Field(default=256, ge=0)
    # Weighted reciprocal rank fusion: sum of weight / (rrf_k + rank) over the streams.
    rrf_k: int = Field(default=60, ge=1)
    weight_bm25: float = Field(default=1.0, ge=0)
    weight_dense: float = Field(default=1.0, ge=0)
    weight_graph: float = Field(default=0.25, ge=0)  # see StreamWeights
    # Temporal decay exp(-rate * hours since the item happened); evergreen items are exempt.
    # 0.0005/h halves a score in about 58 days.
    decay_per_hour: float = Field(default=0.0005, ge=0)
    # Composite score: relevance (fused, normalised) + importance + recency.
    score_relevance: float = Field(default=1.0, ge=0)
    score_importance: float = Field(default=0.2, ge=0)
    score_recency: float = Field(default=0.1, ge=0)
    # How many candidates each stream returns before fusion.
    stream_candidates: int = Field(default=50, ge=1, le=1_000)
    # Extra index keys of a turn (each maps back to the turn): the previous short turn joined
    # to it, and its first-person sentences. Changing these needs a replay of the indexer.
    index_window_keys: bool = True
    # A window's dense vector: embedded by the model ("model"), or composed from its two
    # turns' vectors ("composed": no model call; windows were ~40% of the tokens the model
    # embedded per LongMemEval turn). BM25 reads the window's text either way.
    index_window_vectors: Literal["model", "composed"] = "model"
    index_fact_keys: bool = True
    # Also take facts from the response side (when the "agent" is a person in a transcript).
    index_agent_facts: bool = False
    # A session scores the sum of its best this-many keys (recall's session ranking). On the
    # dev data its best key alone ranks sessions best (LoCoMo recall_all@5 0.843 vs 0.830 for
    # the best two; LongMemEval-S the same 0.898).
    session_top_keys: int = Field(default=1, ge=1, le=100)
    # Added to a turn's fused score, times 1 / (rrf_k + 1), when the query names its speaker.
    speaker_bonus: float = Field(default=0.5, ge=0)
    # Weight of the date prior (items near a date the query implies: "two weeks ago").
    weight_date: float = Field(default=0.5, ge=0)
    # How often the retention sweep looks for expired daily memories.
    retention_sweep_seconds: float = Field(default=3_600.0, gt=0)

    # --- MemoryOS tiers (the LLM steps; embeddings use the embedding_* fields) ---
    # An OpenAI-compatible chat endpoint; unset means the deterministic offline extractor.
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr | None = None
    llm_timeout_seconds: float = Field(default=30.0, gt=0)
    llm_attempts: int = Field(default=3, ge=1, le=20)
    # Width of an OpenAI-compatible embedding model's vectors (MiniLM reports its own).
    embedding_dimension: int = Field(default=384, ge=1)
    # The MemoryOS parameters; the defaults are the paper's.
    mtm_theta: float = 0.6
    mtm_max_segments: int = Field(default=200, ge=1)
    mtm_heat_mu_seconds: float = Field(default=1e7, gt=0)
    mtm_promotion_tau: float = 5.0
    # Segments the MTM worker keeps in memory between its batches, all users together (3.5 KB
    # each decoded, measured); 0: read every user's segments from SQL for every batch.
    mtm_held_segments: int = Field(default=20_000, ge=0)
    recall_top_segments: int = Field(default=5, ge=1)
    recall_top_k: int = Field(default=10, ge=1)
    lpm_knowledge_capacity: int = Field(default=100, ge=1)
    lpm_agent_traits_capacity: int = Field(default=100, ge=1)

    # --- `memoryd mcp`: whose memory its tools read and write (never a tool argument) ---
    # stdio serves one scope: the tenant, user and agent (and optionally session) set here.
    mcp_tenant: str | None = None
    mcp_user: str | None = None
    mcp_agent: str = "default"
    mcp_session: str | None = None
    # Streamable HTTP serves the scope each caller's bearer token maps to, from this JSON file:
    # {"<token>": {"tenant": "acme", "user_id": "alice", "agent_id": "travel-bot"}, ...}.
    mcp_tokens_file: Path | None = None

    # --- `memoryd http`: the HTTP API's bearer tokens, the same JSON shape as MCP's, where an
    # entry may leave out the user (a tenant-wide token: the request names the user) ---
    http_tokens_file: Path | None = None

    # --- operations: health (/healthz), readiness (/readyz) and Prometheus metrics (/metrics)
    # served by each process on this port (unset: not served; 0: any free port) ---
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = Field(default=None, ge=0, le=65_535)
    # How often the figures that ask NATS and SQL (lag, dead letters, readiness) are refreshed.
    metrics_interval_seconds: float = Field(default=5.0, gt=0)

    log_format: Literal["auto", "console", "json"] = "auto"
    log_level: str = "INFO"

    @model_validator(mode="after")
    def _openai_embeddings_need_an_endpoint(self) -> Settings:
        # Without a base URL the openai client targets the public OpenAI API, whose models'
        # widths (1536, 3072) are not the index's: every event would be dead-lettered.
        if self.embedding_kind == "openai" and not self.embedding_base_url:
            raise ValueError(
                "MEMORYD_EMBEDDING_KIND=openai needs MEMORYD_EMBEDDING_BASE_URL (the endpoint, "
                "e.g. https://api.openai.com/v1) and MEMORYD_EMBEDDING_DIMENSION (its width)"
            )
        return self

    @model_validator(mode="after")
    def _latest_optimisation_after_the_quiet_spell(self) -> Settings:
        if self.index_optimize_latest_seconds < self.index_optimize_quiet_seconds:
            raise ValueError(
                "MEMORYD_INDEX_OPTIMIZE_LATEST_SECONDS must be at least "
                "MEMORYD_INDEX_OPTIMIZE_QUIET_SECONDS (the quiet spell it bounds)"
            )
        return self

    def secrets(self) -> list[str]:
        """Return every secret value set (what logs, errors and dead letters must not show)."""
        values = [
            secret.get_secret_value()
            for secret in (
                self.nats_password,
                self.qdrant_api_key,
                self.embedding_api_key,
                self.llm_api_key,
            )
            if secret is not None
        ]
        values += [url_password(url) for url in (self.database_url, self.nats_url) if url]
        return [value for value in values if value]

    def resolved_auth_dir(self) -> Path:
        """Return where `memoryd tenants` keeps credentials."""
        return self.auth_dir or self.data_dir / "auth"

    def resolved_database_url(self) -> str:
        """Return the configured database URL, or the embedded SQLite file."""
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{(self.data_dir / 'memoryd.db').resolve()}"

    def embedded_nats_url(self) -> str:
        """Return the URL the embedded nats-server listens on."""
        return f"nats://{self.embedded_nats_host}:{self.embedded_nats_port}"
