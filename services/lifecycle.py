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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.scope import SearchScope

INPUT_EVENTS: tuple[type[Event], ...] = (
    TurnRecorded,
    MemoryRemembered,
    MemoryForgotten,
    SessionEnded,
)
LIST_PAGE = 200


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
    found = await read_subjects(client._js, stream, [_filter(tenant, user)], timeout)
    events: list[AnyEvent] = []
    for data in found:
        try:
            events.append(decode_event(data))
        except ValueError:
            continue
    return events


async def current_memories(client: MemoryClient, tenant: str, users: Iterable[str]) -> list[str]:
    """Return each user's explicit memories as JSON lines (every agent, every page)."""
    lines = []
    for user in sorted(set(users)):
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
    return lines


async def export_lines(
    client: MemoryClient, stream: str, tenant: str, user: str | None
) -> list[str]:
    """Return the export of a tenant (or one user) as JSON lines."""
    events = await logged_events(client, stream, tenant, user)
    lines = [
        json.dumps({"record": "event", "event": json.loads(event.model_dump_json())})
        for event in events
    ]
    users = [user] if user is not None else [event.scope.user_id for event in events]
    return lines + await current_memories(client, tenant, users)


@dataclass(frozen=True)
class ImportReport:
    """What an import did: input events published, already in the log, and lines passed over."""

    published: int
    present: int
    passed_over: int


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


async def import_lines(client: MemoryClient, stream: str, lines: Sequence[str]) -> ImportReport:
    """Publish the input events of an export the log does not hold yet (by event id)."""
    events, passed_over = input_events(lines)
    held: set[str] = set()
    for tenant in sorted({event.scope.tenant for event in events}):
        held |= {str(e.event_id) for e in await logged_events(client, stream, tenant, None)}
    missing = [event for event in events if str(event.event_id) not in held]
    if missing:
        await client.publish_many(missing)
    return ImportReport(len(missing), len(events) - len(missing), passed_over)
