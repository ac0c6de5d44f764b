"""The SQL read models. Every table here is a projection of the log, rebuilt by replay.

Every read model names the owner of each row (``tenant`` and ``user_id``): erasing a user
deletes exactly the rows that name them (tests/unit/test_table_ownership.py).
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    MetaData,
    String,
    Table,
    Text,
    Uuid,
)

metadata = MetaData()

# consumer -> last stream sequence applied, written in the same transaction as the change.
tracking = Table(
    "tracking",
    metadata,
    Column("consumer", String(64), primary_key=True),
    Column("position", BigInteger, nullable=False),
)

# stream name -> when that stream was created: the log these read models were folded from.
# Positions are stream sequences, which mean nothing in another stream of the same name (one
# deleted and made again): workers refuse to continue on another log (`memoryd replay`).
log_identity = Table(
    "log_identity",
    metadata,
    Column("stream", String(64), primary_key=True),
    Column("created", String(64), nullable=False),
)

# consumer -> the last stream sequence whose batch changed its read models (a batch of events
# it does not fold moves ``tracking`` only). Readers that cache a read model key it on this.
read_model_versions = Table(
    "read_model_versions",
    metadata,
    Column("consumer", String(64), primary_key=True),
    Column("sequence", BigInteger, nullable=False),
)

# (consumer, owner) -> the last stream sequence whose batch changed that user's rows, written
# with ``read_model_versions``; ``owner`` is a digest of the tenant and user id (the row names
# nobody, so erasure leaves it), ``erased`` says the change was the user's erasure. A reader
# that caches one user's state keys it on this: other users' writes leave it standing.
# Readers follow it by sequence (what changed since they last looked), so it is indexed so.
user_versions = Table(
    "user_versions",
    metadata,
    Column("consumer", String(64), primary_key=True),
    Column("owner", String(32), primary_key=True),
    Column("sequence", BigInteger, nullable=False),
    Column("erased", Boolean, nullable=False),
    Index("user_versions_by_sequence", "consumer", "sequence"),
)

# consumer -> every event id it applied, where, and a digest of the content: an event id met
# again later in the log is a duplicate (same digest: skipped) or a conflict (dead-lettered);
# the first occurrence wins in every projection. Written in the change's transaction.
applied_events = Table(
    "applied_events",
    metadata,
    Column("consumer", String(64), primary_key=True),
    Column("event_id", Uuid, primary_key=True),
    Column("stream_seq", BigInteger, nullable=False),
    Column("digest", String(64), nullable=False),
)

stm_pages = Table(
    "stm_pages",
    metadata,
    Column("turn_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("session_id", String(64)),
    Column("namespace", String(64), nullable=False),
    Column("query", Text, nullable=False),
    Column("response", Text, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("stream_seq", BigInteger, nullable=False),
    Index("ix_stm_conversation", "tenant", "user_id", "agent_id", "stream_seq"),
)

memories = Table(
    "memories",
    metadata,
    Column("memory_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("session_id", String(64)),
    Column("namespace", String(64), nullable=False),
    Column("key", String(200)),
    Column("content", Text, nullable=False),
    Column("category", String(16), nullable=False),
    Column("memory_type", String(16), nullable=False),
    Column("importance", Float, nullable=False),
    Column("evergreen", Boolean, nullable=False),
    Column("metadata", JSON, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True)),
    Column("source_event_id", Uuid, nullable=False),
    Column("stream_seq", BigInteger, nullable=False),
    Index("ix_memories_scope", "tenant", "user_id", "agent_id", "namespace"),
    Index("ix_memories_key", "tenant", "user_id", "agent_id", "namespace", "key"),
    Index("ix_memories_session", "tenant", "user_id", "session_id", "category"),
)

# --- hybrid retrieval (indexer access counts, knowledge graph) -----------------------

# Which version of a daily memory has expired (folded from memory.expired): the retention
# sweep publishes an expiry once per version.
memory_expirations = Table(
    "memory_expirations",
    metadata,
    Column("memory_id", Uuid, primary_key=True),
    Column("source_event_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("expired_at", DateTime(timezone=True), nullable=False),
)

# Knowledge-graph nodes, one per (tenant, user, entity name casefolded).
graph_nodes = Table(
    "graph_nodes",
    metadata,
    Column("node_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("name_key", String(200), nullable=False),
    Column("name", String(200), nullable=False),
    Column("entity_type", String(64), nullable=False),
    Column("first_seen_at", DateTime(timezone=True), nullable=False),
    Index("ix_graph_nodes_name", "tenant", "user_id", "name_key", unique=True),
)

# Bi-temporal edges: a contradicted edge gets invalid_at, it is never deleted.
graph_edges = Table(
    "graph_edges",
    metadata,
    Column("edge_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("source_key", String(200), nullable=False),
    Column("relation", String(200), nullable=False),
    Column("target_key", String(200), nullable=False),
    Column("item_id", Uuid, nullable=False),
    Column("valid_at", DateTime(timezone=True), nullable=False),
    Column("invalid_at", DateTime(timezone=True)),
    Column("stream_seq", BigInteger, nullable=False),
    Index("ix_graph_edges_source", "tenant", "user_id", "source_key"),
    Index("ix_graph_edges_target", "tenant", "user_id", "target_key"),
)

# Which indexed item (index point id) mentions which entity: graph search returns items.
graph_mentions = Table(
    "graph_mentions",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("user_id", String(64), primary_key=True),
    Column("name_key", String(200), primary_key=True),
    Column("item_id", Uuid, primary_key=True),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
)

# The items the graph can return (the index's point ids), with what recall needs to show them.
graph_items = Table(
    "graph_items",
    metadata,
    Column("item_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("session_id", String(64)),
    Column("namespace", String(64), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("category", String(16)),
    Column("memory_id", Uuid),
    # The event the item's current text came from: an extraction of an older text is stale.
    Column("source_event_id", Uuid, nullable=False),
    Column("text", Text, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Index("ix_graph_items_memory", "tenant", "user_id", "memory_id"),
)

# The last turn of each conversation the indexer has seen: the next turn's window key joins it.
index_last_turns = Table(
    "index_last_turns",
    metadata,
    Column("conversation_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("text", Text, nullable=False),
)

RETRIEVAL_READ_MODELS = (
    index_last_turns,
    memory_expirations,
    graph_nodes,
    graph_edges,
    graph_mentions,
    graph_items,
)

# --- MemoryOS tiers (STM meta chain, MTM segments and pages, LPM persona) --------

# The continuity verdict and chain summary of each recent page (last stm_capacity per chat).
stm_chain = Table(
    "stm_chain",
    metadata,
    Column("turn_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("query", Text, nullable=False),
    Column("response", Text, nullable=False),
    Column("linked", Boolean, nullable=False),
    Column("meta_chain", Text, nullable=False),
    Column("stream_seq", BigInteger, nullable=False),
    Index("ix_stm_chain_conversation", "tenant", "user_id", "agent_id", "stream_seq"),
)

# A topic segment; ``state`` is the domain Segment's canonical JSON (vector, heat counters).
mtm_segments = Table(
    "mtm_segments",
    metadata,
    Column("segment_id", String(64), primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("state", Text, nullable=False),
    Index("ix_mtm_segments_user", "tenant", "user_id"),
)

# A page filed in a segment, with its unit vector (base64 float32) for retrieval.
mtm_pages = Table(
    "mtm_pages",
    metadata,
    Column("turn_id", Uuid, primary_key=True),
    Column("segment_id", String(64), nullable=False),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("agent_id", String(64), nullable=False),
    Column("session_id", String(64)),
    Column("query", Text, nullable=False),
    Column("response", Text, nullable=False),
    Column("occurred_at", DateTime(timezone=True), nullable=False),
    Column("keywords", JSON, nullable=False),
    Column("fscore", Float),
    Column("vector", Text, nullable=False),
    # The segment's promoted_count when the page joined: pages of the current round go to LPM.
    Column("promotion_round", BigInteger, nullable=False),
    Index("ix_mtm_pages_segment", "segment_id"),
)

# A user's long-term persona: each column is a domain state's canonical JSON.
lpm_personas = Table(
    "lpm_personas",
    metadata,
    Column("tenant", String(64), primary_key=True),
    Column("user_id", String(64), primary_key=True),
    Column("profile", Text, nullable=False),
    Column("knowledge", Text, nullable=False),
    Column("traits", Text, nullable=False),
    Column("agent_traits", Text, nullable=False),
)

# Provenance of each persona extraction: the turns and sessions its facts came from.
lpm_extractions = Table(
    "lpm_extractions",
    metadata,
    Column("event_id", Uuid, primary_key=True),
    Column("tenant", String(64), nullable=False),
    Column("user_id", String(64), nullable=False),
    Column("segment_id", String(64), nullable=False),
    Column("turn_ids", JSON, nullable=False),
    Column("session_ids", JSON, nullable=False),
)

MEMORYOS_READ_MODELS = (stm_chain, mtm_segments, mtm_pages, lpm_personas, lpm_extractions)

READ_MODELS = (stm_pages, memories, *RETRIEVAL_READ_MODELS, *MEMORYOS_READ_MODELS)
