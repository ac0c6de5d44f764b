"""The `memoryd` commands for people at a terminal: status, recall, remember, forget, and
replay's summary.

Each talks to a running memoryd through the SDK (or reads JetStream's own state, for status)
and prints a table (``rich``) instead of JSON.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from rich.table import Table

from memoryd.services.runtime.replay import ReplayReport
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import stream_partitions
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import RecallResponse, Scope
from memoryd.shared.settings import Settings


async def projection_status(
    js: JetStreamContext, settings: Settings
) -> tuple[int, dict[str, tuple[int, int] | None], dict[str, int]]:
    """Return the log's last sequence, each projection's (applied, lag), and dead letters.

    ``None`` for a projection whose consumer does not exist (its worker never ran).
    """
    info = await js.stream_info(settings.stream_name)
    last = info.state.last_seq or 0
    consumers: dict[str, tuple[int, int] | None] = {}
    for name in subjects.partition_consumers(subjects.LOG_CONSUMERS, stream_partitions(info)):
        try:
            consumer = await js.consumer_info(settings.stream_name, name)
        except NotFoundError:
            consumers[name] = None
            continue
        lag = (consumer.num_pending or 0) + (consumer.num_ack_pending or 0)
        consumers[name] = (consumer.ack_floor.stream_seq or 0, lag)
    dead = await js.stream_info(
        settings.dead_letter_stream, subjects_filter=subjects.ALL_DEAD_LETTERS
    )
    prefix = f"{subjects.DLQ_PREFIX}."
    parked = {s.removeprefix(prefix): n for s, n in (dead.state.subjects or {}).items()}
    return last, consumers, parked


def status_table(
    last: int, consumers: Mapping[str, tuple[int, int] | None], parked: Mapping[str, int]
) -> Table:
    """Render each projection's position, lag and dead letters."""
    table = Table(title=f"memoryd: the log holds {last:,} events")
    for column in ("projection", "applied through", "lag", "dead letters"):
        table.add_column(column, justify="left" if column == "projection" else "right")
    for name, state in consumers.items():
        dead = str(parked.get(name, 0))
        if state is None:
            table.add_row(name, "never ran", "-", dead)
        else:
            applied, lag = state
            table.add_row(name, f"{applied:,}", f"{lag:,}", dead)
    return table


def replay_table(report: ReplayReport) -> Table:
    """Render a replay: how fast, each projection's fold time, each table's checksum."""
    table = Table(
        title=f"replayed {report.events:,} events in {report.seconds:.2f}s "
        f"({report.events_per_second:,.0f} events/s)"
    )
    table.add_column("projection or table")
    table.add_column("through / checksum", justify="right")
    table.add_column("seconds", justify="right")
    for consumer, seconds in report.folds.items():
        table.add_row(consumer, f"{report.targets.get(consumer, 0):,}", f"{seconds:.2f}")
    for name, checksum in report.checksums.items():
        table.add_row(name, checksum, "")
    return table


def recall_table(response: RecallResponse, explain: bool) -> Table:
    """Render what recall found: memories first, then the items, best first."""
    table = Table(title=f"recall: {len(response.items)} items, {response.tokens} tokens")
    table.add_column("kind")
    table.add_column("score", justify="right")
    table.add_column("text")
    table.add_column("session")
    if explain:
        table.add_column("streams (rank, score)")
    for memory in response.memories:
        row = ["memory", f"{memory.score:.3f}", memory.content, "-"]
        table.add_row(*row, *([""] if explain else []))
    for item in response.items:
        row = [item.kind, f"{item.score:.3f}", item.text, item.session_id or "-"]
        if explain:
            streams = item.explanation.streams if item.explanation else {}
            shown = ", ".join(f"{n} #{s.rank} {s.score:.3f}" for n, s in sorted(streams.items()))
            row.append(shown)
        table.add_row(*row)
    return table


def scope_of(tenant: str, user: str, agent: str, session: str | None) -> Scope:
    """Return the scope the command's options name."""
    return Scope(tenant=tenant, user_id=user, agent_id=agent, session_id=session)


async def remember(client: MemoryClient, scope: Scope, content: str, key: str | None) -> str:
    """Store a memory; return the line that says so (its id, and its key if any)."""
    memory_id = await client.remember(scope, content, key=key)
    named = f" (key {key})" if key else ""
    return f"remembered {memory_id}{named} for {scope.tenant}/{scope.user_id}"


async def forget(
    client: MemoryClient, scope: Scope, memory_id: uuid.UUID | None, key: str | None
) -> str:
    """Forget a memory by id or key; return the line that says so."""
    await client.forget(scope, memory_id=memory_id, key=key)
    return f"forgot {memory_id or f'key {key}'} for {scope.tenant}/{scope.user_id}"
