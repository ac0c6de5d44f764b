"""The SQL read models. Every table here is a projection of the log, rebuilt by replay."""

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

READ_MODELS = (stm_pages, memories)
