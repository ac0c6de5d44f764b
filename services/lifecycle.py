"""`memoryd export` and `memoryd import`: a tenant's (or one user's) memory as JSON lines.

An export holds, one JSON object per line:

- ``{"record": "event", "event": {...}}`` for every event of the tenant or user in the log, in
  log order (input events and everything derived from them);
- ``{"record": "memory", "memory": {...}}`` for every explicit memory the read model holds
  now (its latest version; what the events folded into).

An import publishes the export's *input* events (turns, memories remembered and forgotten,
session ends) that the log does not hold yet, with their own ids: the workers derive the rest
as they did the first time. Importing the same file twice publishes nothing the second time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rich.table import Table

from memoryd.services.runtime.progress import Progress, quiet
from memoryd.shared import subjects
from memoryd.shared.adapters.nats_log import read_subjects
from memoryd.shared.client import MemoryClient
from memoryd.shared.contracts import (
    MemoryForgotten,
    MemoryRemembered,
    Scope,
    SessionEnded,
    TurnRecorded,
    decode_event,
)
from memoryd.shared.contracts.catalog import AnyEvent, decode_valid, event_type_name
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.scope import SearchScope

INPUT_EVENTS: tuple[type[Event], ...] = (
    TurnRecorded,
    MemoryRemembered,
    MemoryForgotten,
    SessionEnded,
)
LIST_PAGE = 200
PUBLISH_CHUNK = 500  # events per pipelined publish (and per step of the progress bar)


def _filter(tenant: str, user: str | None) -> str:
    if user is None:
        return subjects.tenant_events_filter(tenant)
    return subjects.user_events_filter(tenant, user)


async def logged_events(
    client: MemoryClient, stream: str, tenant: str, user: str | None, timeout: float = 120.0
) -> list[AnyEvent]:
    """Return every event of the tenant (or user) in the log, in log order, decoded.

    What does not decode (the workers dead-lettered it) is left out.
    """
    on_leader = client._tenant is None  # a tenant may not ask which node leads the stream
    found = await read_subjects(
        client._js, stream, [_filter(tenant, user)], timeout, on_leader=on_leader
    )
    return decode_valid(found)


async def current_memories(
    client: MemoryClient, tenant: str, users: Iterable[str], progress: Progress = quiet
) -> list[str]:
    """Return each user's explicit memories as JSON lines (every agent, every page)."""
    lines = []
    ordered = sorted(set(users))
    for done, user in enumerate(ordered, 1):
        scope, offset = Scope(tenant=tenant, user_id=user), 0
        while True:
            page = await client.list_memories(
                scope, search_scope=SearchScope.USER, limit=LIST_PAGE, offset=offset
            )
            lines += [
                json.dumps({"record": "memory", "memory": m.model_dump(mode="json")})
                for m in page.memories
            ]
            offset += len(page.memories)
            if not page.memories or offset >= page.total:
                break
        progress("memories of each user", done, len(ordered))
    return lines


async def export_lines(
    client: MemoryClient,
    stream: str,
    tenant: str,
    user: str | None,
    progress: Progress = quiet,
) -> list[str]:
    """Return the export of a tenant (or one user) as JSON lines.

    ``progress`` is told when the log is read and as each user's memories are.
    """
    progress("events from the log", 0, 1)
    events = await logged_events(client, stream, tenant, user)
    progress("events from the log", 1, 1)
    lines = [
        json.dumps({"record": "event", "event": json.loads(event.model_dump_json())})
        for event in events
    ]
    users = [user] if user is not None else [event.scope.user_id for event in events]
    return lines + await current_memories(client, tenant, users, progress)


def export_summary(lines: Iterable[str]) -> Counter[str]:
    """Count an export's records: events by type, and current memories."""
    counts: Counter[str] = Counter()
    for line in lines:
        record = json.loads(line)
        kind = record.get("record")
        counts["memory (current)" if kind == "memory" else str(record["event"]["type"])] += 1
    return counts


@dataclass(frozen=True)
class ImportReport:
    """What an import did: input events published, already in the log, and lines passed over.

    ``by_type`` counts the published and the present events of each type.
    """

    published: int
    present: int
    passed_over: int
    by_type: dict[str, tuple[int, int]] = field(default_factory=dict)


def input_events(lines: Sequence[str]) -> tuple[list[AnyEvent], int]:
    """Return the export's input events in file order, and how many lines were not one."""
    events: list[AnyEvent] = []
    passed_over = 0
    for line in lines:
        if not line.strip():
            continue
        record = json.loads(line)
        if record.get("record") != "event":
            passed_over += 1
            continue
        event = decode_event(json.dumps(record["event"]).encode())
        if isinstance(event, INPUT_EVENTS):
            events.append(event)
        else:
            passed_over += 1
    return events, passed_over


async def import_lines(
    client: MemoryClient, stream: str, lines: Sequence[str], progress: Progress = quiet
) -> ImportReport:
    """Publish the input events of an export the log does not hold yet (by event id).

    ``progress`` is told as the missing events are published, a chunk at a time.
    """
    events, passed_over = input_events(lines)
    held: set[str] = set()
    for tenant in sorted({event.scope.tenant for event in events}):
        held |= {str(e.event_id) for e in await logged_events(client, stream, tenant, None)}
    missing = [event for event in events if str(event.event_id) not in held]
    for start in range(0, len(missing), PUBLISH_CHUNK):
        await client.publish_many(missing[start : start + PUBLISH_CHUNK])
        progress("publishing", min(start + PUBLISH_CHUNK, len(missing)), len(missing))
    published = Counter(event_type_name(event) for event in missing)
    present = Counter(event_type_name(event) for event in events) - published
    by_type = {name: (published[name], present[name]) for name in sorted(published | present)}
    return ImportReport(len(missing), len(events) - len(missing), passed_over, by_type)


def export_table(counts: Mapping[str, int], where: str) -> Table:
    """Render what an export wrote: its records by kind (events by type, current memories)."""
    table = Table(title=f"exported {sum(counts.values()):,} records", caption=f"to {where}")
    table.add_column("record")
    table.add_column("count", justify="right")
    for kind, count in sorted(counts.items()):
        table.add_row(kind, f"{count:,}")
    return table


def import_table(report: ImportReport) -> Table:
    """Render what an import did, by event type: published, and already in the log."""
    table = Table(title=f"imported {report.published:,} events")
    for column in ("event", "published", "already in the log"):
        table.add_column(column, justify="left" if column == "event" else "right")
    for name, (published, present) in report.by_type.items():
        table.add_row(name, f"{published:,}", f"{present:,}")
    table.caption = f"{report.passed_over:,} records derived or read models: not published"
    return table
