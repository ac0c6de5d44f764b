"""The one place that owns subject names, stream definitions and consumer names.

Subjects put tenant and user in the hierarchy so NATS permissions can be granted per tenant
(``memoryd.ev.<tenant>.>``) and ordering holds per user:

    memoryd.ev.<tenant>.<user>.<event type>     every event (the log, stream MEMORYD)
    memoryd.dlq.<consumer>                      dead letters (stream MEMORYD_DLQ)
    memoryd.notify.<tenant>.<user>.<kind>       memory-updated notifications (stream MEMORYD_NOTIFY)
    memoryd.notify.<tenant>.<user>.recallable.<event id>
                                                every projection recall reads applied the event
    memoryd.rpc.<tenant>.recall                 recall request-reply (queue group)
    memoryd.rpc.<tenant>.memories.list          list a scope's memories (request-reply, queue
                                                group); one grant ``memoryd.rpc.<tenant>.>``
                                                covers the tenant's request-reply subjects
    memoryd.rpc.<tenant>.browse                 everything held of one user (request-reply,
                                                queue group): the memory browser's read
    _INBOX_<tenant>.>                           a tenant's reply inboxes (its apps connect with
                                                this inbox prefix; no other tenant may read it)
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the contracts name their publishers from here: no import back at run time
    from memoryd.shared.contracts.scope import Scope

EVENTS_PREFIX = "memoryd.ev"
ALL_EVENTS = f"{EVENTS_PREFIX}.>"
DLQ_PREFIX = "memoryd.dlq"
ALL_DEAD_LETTERS = f"{DLQ_PREFIX}.>"
NOTIFY_PREFIX = "memoryd.notify"
ALL_NOTIFICATIONS = f"{NOTIFY_PREFIX}.>"
RECALLABLE_KIND = "recallable"
RPC_PREFIX = "memoryd.rpc"
RECALL_SUFFIX = "recall"
ALL_RECALL = f"{RPC_PREFIX}.*.{RECALL_SUFFIX}"
RECALL_QUEUE = "memoryd-recall"
INBOX_PREFIX = "_INBOX"
LIST_MEMORIES_SUFFIX = "memories.list"
ALL_LIST_MEMORIES = f"{RPC_PREFIX}.*.{LIST_MEMORIES_SUFFIX}"
LIST_MEMORIES_QUEUE = "memoryd-list-memories"
BROWSE_SUFFIX = "browse"
ALL_BROWSE = f"{RPC_PREFIX}.*.{BROWSE_SUFFIX}"
BROWSE_QUEUE = "memoryd-browse"
# The event types a memory's history is read from (its versions, its end).
MEMORY_HISTORY_TYPES = (
    "memory.remembered.v1",
    "memory.forgotten.v1",
    "memory.expired.v1",
    "session.ended.v1",
)

# Durable consumer names, one per projection; each is also its tracking key in SQL.
STM_CONSUMER = "memoryd-stm"
MEMORIES_CONSUMER = "memoryd-memories"
# Hybrid retrieval workers.
INDEXER_CONSUMER = "memoryd-indexer"
GRAPH_CONSUMER = "memoryd-graph"
# MemoryOS tier workers.
CHAIN_CONSUMER = "memoryd-stm-chain"
MTM_CONSUMER = "memoryd-mtm"
PERSONA_CONSUMER = "memoryd-persona"
MEMORYOS_CONSUMERS = (CHAIN_CONSUMER, MTM_CONSUMER, PERSONA_CONSUMER)
PROJECTION_CONSUMERS = (
    STM_CONSUMER,
    MEMORIES_CONSUMER,
    INDEXER_CONSUMER,
    GRAPH_CONSUMER,
    *MEMORYOS_CONSUMERS,
)
# Each projection's consumer is filtered by the server to the event types it folds. The gate
# (a consumer of its own, run with STM) reads the whole log: what no projection folds (a type
# this version does not know, a subject of another shape) is dead-lettered there with its
# reason, never dropped.
GATE_CONSUMER = "memoryd-gate"
# Every consumer of the log a "applied everything" wait asks about.
LOG_CONSUMERS = (*PROJECTION_CONSUMERS, GATE_CONSUMER)
# The recallable tracker publishes notifications but consumes nothing: its name as a publisher.
RECALLABLE_PUBLISHER = "memoryd-recallable"

# Headers on dead letters.
DLQ_REASON = "Memoryd-Dlq-Reason"
DLQ_CONSUMER = "Memoryd-Dlq-Consumer"
DLQ_ORIGINAL_SUBJECT = "Memoryd-Original-Subject"
DLQ_ORIGINAL_SEQUENCE = "Memoryd-Original-Sequence"


def type_token(event_type: str) -> str:
    """Return the subject token of a versioned event type (``turn.recorded.v1`` ->
    ``turn_recorded_v1``)."""
    return event_type.replace(".", "_")


def event_subject(scope: Scope, event_type: str) -> str:
    """Return the subject an event of ``event_type`` in ``scope`` is published on."""
    return f"{EVENTS_PREFIX}.{scope.tenant}.{scope.user_id}.{type_token(event_type)}"


def type_filter(event_type: str, partition: int | None = None) -> str:
    """Return the filter matching every event of ``event_type``, of any tenant and user (in
    one partition of a partitioned log)."""
    base = f"{EVENTS_PREFIX}.*.*.{type_token(event_type)}"
    return base if partition is None else f"{base}.{partition}"


# --- partitions ---
# With MEMORYD_PARTITIONS N > 1 the stream files every event under a sixth token, its user's
# partition: memoryd.ev.<tenant>.<user>.<type>.<p>. Publishers keep publishing the five-token
# subject; the stream's subject transform appends p = FNV-1a(tenant + user) mod N, which is
# nats-server's partition(N, 1, 2). Every event of a user lands in one partition, so a
# partition's consumer applies each of its users' events in log order.
PARTITIONED_SOURCE = f"{EVENTS_PREFIX}.*.*.*"


def partition_destination(partitions: int) -> str:
    """Return the stream's subject transform destination for ``partitions`` partitions."""
    return (
        f"{EVENTS_PREFIX}.{{{{wildcard(1)}}}}.{{{{wildcard(2)}}}}.{{{{wildcard(3)}}}}"
        f".{{{{partition({partitions},1,2)}}}}"
    )


@functools.lru_cache(maxsize=65_536)  # asked per event per partition when a replay folds
def partition(tenant: str, user_id: str, partitions: int) -> int:
    """Return the partition of a user's events (nats-server's partition(): FNV-1a 32 of the
    tokens joined, modulo the count)."""
    digest = 0x811C9DC5
    for byte in f"{tenant}{user_id}".encode():
        digest = ((digest ^ byte) * 0x01000193) & 0xFFFFFFFF
    return digest % partitions


def partition_of(subject: str) -> int | None:
    """Return the partition token of a stored event subject (None: not partitioned)."""
    parts = subject.split(".")
    if len(parts) == 6 and parts[5].isdigit():
        return int(parts[5])
    return None


def unpartitioned(subject: str) -> str:
    """Return the subject an event was published on (its stored subject less its partition)."""
    return subject.rsplit(".", 1)[0] if partition_of(subject) is not None else subject


def partition_filter(partition: int) -> str:
    """Return the filter matching every event of one partition."""
    return f"{PARTITIONED_SOURCE}.{partition}"


def partition_consumer(consumer: str, partition: int | None) -> str:
    """Return the durable name of a projection's consumer of one partition."""
    return consumer if partition is None else f"{consumer}-p{partition}"


def in_partition(consumers: Sequence[str], partition: int) -> list[str]:
    """Return the durable names the projections ``consumers`` read one partition under (the
    gate reads every partition under its own name)."""
    return [
        name if name == GATE_CONSUMER else partition_consumer(name, partition) for name in consumers
    ]


def partition_consumers(consumers: Sequence[str], partitions: int) -> list[str]:
    """Return the durable names the projections ``consumers`` run under: one per partition
    of a partitioned log."""
    if partitions == 1:
        return list(consumers)
    names = [name for p in range(partitions) for name in in_partition(consumers, p)]
    return list(dict.fromkeys(names))  # the gate once


def base_consumer(consumer: str) -> str:
    """Return the projection a (partition's) consumer belongs to."""
    base, _, number = consumer.rpartition("-p")
    return base if base and number.isdigit() else consumer


def subject_type_token(subject: str) -> str | None:
    """Return the event type token of an event subject, stored or published (None: not an
    event subject's shape)."""
    parts = unpartitioned(subject).split(".")
    if len(parts) != 5 or f"{parts[0]}.{parts[1]}" != EVENTS_PREFIX:
        return None
    return parts[4]


def subject_matches(pattern: str, subject: str) -> bool:
    """Return whether ``subject`` matches the NATS filter ``pattern`` (``*`` and ``>``)."""
    wanted, tokens = pattern.split("."), subject.split(".")
    for index, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > index
        if index >= len(tokens) or token not in ("*", tokens[index]):
            return False
    return len(tokens) == len(wanted)


def dead_letter_subject(consumer: str) -> str:
    """Return the subject a consumer parks its dead letters on."""
    return f"{DLQ_PREFIX}.{consumer}"


def notify_subject(tenant: str, user_id: str, kind: str) -> str:
    """Return the subject of a memory-updated notification."""
    return f"{NOTIFY_PREFIX}.{tenant}.{user_id}.{kind.replace('.', '_')}"


def notify_subject_pattern(kind: str) -> str:
    """Return the subject pattern of ``kind``'s notifications, placeholders in angle brackets."""
    subject = notify_subject("<tenant>", "<user>", kind)
    return f"{subject}.<event id>" if kind == RECALLABLE_KIND else subject


def recallable_subject(tenant: str, user_id: str, event_id: uuid.UUID) -> str:
    """Return the subject of the notice that ``event_id`` is recallable (one per event)."""
    return f"{notify_subject(tenant, user_id, RECALLABLE_KIND)}.{event_id}"


def recallable_filter(
    event_id: uuid.UUID, scope: Scope | None = None, *, tenant: str | None = None
) -> str:
    """Return the filter matching the recallable notice of ``event_id``.

    With ``scope``, only under its tenant and user; with ``tenant``, under any of its users
    (either is what per-tenant permissions allow); without, under any.
    """
    if scope is not None:
        return recallable_subject(scope.tenant, scope.user_id, event_id)
    return f"{NOTIFY_PREFIX}.{tenant or '*'}.*.{RECALLABLE_KIND}.{event_id}"


def tenant_events_filter(tenant: str) -> str:
    """Return the filter matching every event of one tenant in the log."""
    return f"{EVENTS_PREFIX}.{tenant}.>"


def user_events_filter(tenant: str, user_id: str) -> str:
    """Return the filter matching every event of one user in the log."""
    return f"{EVENTS_PREFIX}.{tenant}.{user_id}.>"


def stored_filters(published: str) -> list[str]:
    """Return the filters matching the events published on ``published`` as the stream
    stores them: as they are, or under a partition (whether the log is partitioned or not)."""
    return [published, f"{published}.*"]


def user_event_filters(tenant: str, user_id: str, event_types: Sequence[str]) -> list[str]:
    """Return the filters of one user's events of the given types, as stored (two per type:
    unpartitioned and partitioned)."""
    return [
        stored
        for t in event_types
        for stored in stored_filters(f"{EVENTS_PREFIX}.{tenant}.{user_id}.{type_token(t)}")
    ]


def recall_subject(tenant: str) -> str:
    """Return the subject a tenant's recall requests are sent to."""
    return f"{RPC_PREFIX}.{tenant}.{RECALL_SUFFIX}"


def inbox_prefix(tenant: str) -> str:
    """Return the reply-inbox prefix of a tenant's apps (what its credentials may read)."""
    return f"{INBOX_PREFIX}_{tenant}"


def list_memories_subject(tenant: str) -> str:
    """Return the subject a tenant's list-memories requests are sent to."""
    return f"{RPC_PREFIX}.{tenant}.{LIST_MEMORIES_SUFFIX}"


def browse_subject(tenant: str) -> str:
    """Return the subject a tenant's browse requests are sent to."""
    return f"{RPC_PREFIX}.{tenant}.{BROWSE_SUFFIX}"


def rpc_tenant(subject: str) -> str | None:
    """Return the tenant a request-reply subject names (None: not a per-tenant rpc subject)."""
    prefix = f"{RPC_PREFIX}."
    if not subject.startswith(prefix):
        return None
    tenant, _, rest = subject.removeprefix(prefix).partition(".")
    return tenant if tenant and rest else None


def notify_filter(tenant: str, user_id: str | None = None) -> str:
    """Return the subscription filter for a tenant's (or one user's) notifications."""
    return f"{NOTIFY_PREFIX}.{tenant}.{user_id or '*'}.>"
