"""Every notification a projection publishes is in the catalogue, as the catalogue says.

The projections the stack builds (``build_projections`` with every component, real MiniLM,
the offline extractor, Qdrant Edge and SQLite) and the recallable tracker are driven live
over one conversation, through ``apply_once`` as the runner drives them. What they add to
the log (STM's evictions, the recorded decisions) is appended to an in-memory log and fed
back to every projection in log order, as JetStream would. Each notification is then checked
against its kind's contract: the publisher, the type of the event named by ``event_id``, the
version and what ``item_ids`` hold.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from memoryd.services.bootstrap import (
    ALL_COMPONENTS,
    build_model,
    build_projections,
    open_retrieval,
)
from memoryd.services.runtime.projection import Positioned, Projection, apply_once
from memoryd.services.runtime.recallable import RecallableTracker
from memoryd.shared import subjects
from memoryd.shared.adapters.embeddings import Embedder
from memoryd.shared.adapters.llm import OfflineExtractor
from memoryd.shared.adapters.sql.engine import create_engine, session_factory
from memoryd.shared.adapters.sql.schema import create_schema
from memoryd.shared.contracts import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    Scope,
    SessionEnded,
    TurnRecorded,
)
from memoryd.shared.contracts.events import Event
from memoryd.shared.contracts.notifications import (
    NOTIFICATION_TYPES,
    ItemIds,
    MemoryUpdated,
    type_name,
)
from memoryd.shared.domain.memories import memory_identity
from memoryd.shared.settings import Settings

E = TypeVar("E", bound=Event)

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SCOPE = Scope(tenant="acme", user_id="alice", session_id="s1")
CATALOGUE = {model.kind_name(): model for model in NOTIFICATION_TYPES}
# Small tiers, so four turns reach every tier: a FIFO of one page (each turn evicts the one
# before), a threshold no Fscore reaches (each page opens a segment), one segment per user
# (each new one evicts the colder), and a promotion threshold every new segment passes.
TIERS = {
    "stm_capacity": 1,
    "mtm_theta": 3.0,
    "mtm_max_segments": 1,
    "mtm_promotion_tau": 0.5,
}


def conversation() -> list[Event]:
    """Return what an app writes: turns that teach facts, memories, a forget, a session end."""
    said = [
        "I live in Lisbon and I work at Acme.",
        "I love hiking in the mountains.",
        "My sister Ana visits me in May.",
        "I am vegetarian.",
    ]
    turns: list[Event] = [
        TurnRecorded(
            occurred_at=T0 + timedelta(minutes=n), scope=SCOPE, query=text, response="Noted."
        )
        for n, text in enumerate(said)
    ]
    later = T0 + timedelta(hours=1)
    return [
        *turns,
        MemoryRemembered(occurred_at=later, scope=SCOPE, key="diet", content="vegetarian"),
        MemoryRemembered(
            occurred_at=later,
            scope=SCOPE,
            key="trip",
            content="planning a trip to Porto",
            category=Category.CONVERSATION,
        ),
        MemoryForgotten(occurred_at=later, scope=SCOPE, key="diet"),
        SessionEnded(occurred_at=later, scope=SCOPE),
    ]


class MemoryLog:
    """The event log in memory: the app's events, then what the workers append to it.

    It is both the runner's event publisher (``publish_many``: derived events) and the
    workers' decision log (``record``); an id already held keeps its first copy.
    """

    def __init__(self, events: Iterable[Event]) -> None:
        self.events: list[Event] = []
        self.by_id: dict[uuid.UUID, Event] = {}
        self._sequences: dict[uuid.UUID, int] = {}
        for event in events:
            self._append(event)

    async def publish_many(self, events: Iterable[Event]) -> list[int]:
        """Append derived events; return their sequences."""
        return [self._append(event) for event in events]

    async def record(self, event: E) -> E:
        """Append a decision unless its id is held; return the copy the log holds."""
        self._append(event)
        held = self.by_id[event.event_id]
        assert isinstance(held, type(event))
        return held

    def after(self, position: int) -> list[Positioned]:
        """Return the events after ``position``, each with its sequence."""
        tail = self.events[position:]
        return [Positioned(e, position + n) for n, e in enumerate(tail, start=1)]  # type: ignore[arg-type]

    def _append(self, event: Event) -> int:
        if event.event_id not in self.by_id:
            self.by_id[event.event_id] = event
            self.events.append(event)
            self._sequences[event.event_id] = len(self.events)
        return self._sequences[event.event_id]


@dataclass
class Published:
    """The notifications of one run, each with the name of what published it."""

    log: MemoryLog
    notes: list[tuple[str, MemoryUpdated]] = field(default_factory=list)
    driven: set[str] = field(default_factory=set)


class Collector:
    """Stand in for the notification publisher: keep what the tracker publishes."""

    def __init__(self, published: Published) -> None:
        self._published = published

    async def publish(self, notes: Sequence[MemoryUpdated]) -> None:
        """Keep ``notes`` as the recallable tracker's."""
        self._published.notes += [(subjects.RECALLABLE_PUBLISHER, note) for note in notes]


async def drive(
    sessions: async_sessionmaker[AsyncSession],
    projections: Sequence[Projection],
    log: MemoryLog,
) -> Published:
    """Apply the log to every projection live, batch by batch, until none has more to do."""
    published = Published(log)
    tracker = RecallableTracker(projections, Collector(published))  # type: ignore[arg-type]
    positions = dict.fromkeys((p.consumer for p in projections), 0)
    while any(position < len(log.events) for position in positions.values()):
        for projection in projections:
            batch = log.after(positions[projection.consumer])
            if not batch:
                continue
            effects = await apply_once(sessions, projection, batch, log)  # type: ignore[arg-type]
            published.notes += [(projection.consumer, note) for note in effects.notifications]
            positions[projection.consumer] = batch[-1].sequence
            await tracker.applied(projection.consumer, batch[-1].sequence, batch)
    published.driven = set(positions)
    return published


def item_ids_of(log: MemoryLog) -> dict[ItemIds, set[uuid.UUID]]:
    """Return the ids each ``ItemIds`` value may name in ``log``."""
    return {
        ItemIds.TURNS: {e.event_id for e in log.events if isinstance(e, TurnRecorded)},
        ItemIds.MEMORIES: {
            memory_identity(e) for e in log.events if isinstance(e, MemoryRemembered)
        },
        ItemIds.NONE: set(),
    }


def departures(publisher: str, note: MemoryUpdated, log: MemoryLog) -> list[str]:
    """Return how ``note`` departs from its kind's catalogue entry (nothing when it agrees)."""
    contract = CATALOGUE.get(note.kind)
    if contract is None:
        return [f"{publisher} published {note.kind!r}, a kind not in the catalogue"]
    cause = cause_of(note, log)
    causes = [type_name(event_type) for event_type in contract.caused_by]
    version = contract.model_fields["version"].default
    stray = set(note.item_ids) - item_ids_of(log)[contract.holds]
    wrong = {
        f"published by {publisher}, not {contract.published_by}": (
            publisher != contract.published_by
        ),
        f"caused by {cause}, not one of {causes}": cause not in causes,
        f"version {note.version}, not {version}": note.version != version,
        f"item_ids {sorted(map(str, stray))} are not {contract.holds.value}": bool(stray),
    }
    return [f"{note.kind}: {text}" for text, departs in wrong.items() if departs]


def cause_of(note: MemoryUpdated, log: MemoryLog) -> str:
    """Return the type of the event ``note`` names, or say it names none of the log's."""
    event = log.by_id.get(note.event_id)
    return "no event of the log" if event is None else type_name(type(event))


def declared_entries() -> set[tuple[str, str, str]]:
    """Return every (kind, publisher, cause type) the catalogue declares."""
    return {
        (model.kind_name(), model.published_by, type_name(cause))
        for model in NOTIFICATION_TYPES
        for cause in model.caused_by
    }


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    """Load the real MiniLM once (shared with the other modules through bootstrap's cache)."""
    return build_model(Settings())


@pytest.fixture(scope="module")
async def published(
    tmp_path_factory: pytest.TempPathFactory, minilm: Embedder
) -> AsyncIterator[Published]:
    """Drive every projection of the stack and the recallable tracker over the conversation."""
    folder = tmp_path_factory.mktemp("catalogue")
    settings = Settings(
        data_dir=folder, database_url=f"sqlite+aiosqlite:///{folder / 'memoryd.db'}", **TIERS
    )
    engine = create_engine(settings.resolved_database_url())
    await create_schema(engine)
    log = MemoryLog(conversation())
    async with AsyncExitStack() as resources:
        retrieval = await open_retrieval(
            settings, engine, resources, model=minilm, llm=OfflineExtractor()
        )
        projections = build_projections(settings, ALL_COMPONENTS, retrieval, log)
        yield await drive(session_factory(engine), projections, log)
    await engine.dispose()


def test_every_projection_of_the_stack_is_driven(published: Published) -> None:
    """The run covers every consumer of the log, so a new projection is checked too."""
    assert set(subjects.LOG_CONSUMERS) == published.driven


def test_every_notification_published_is_in_the_catalogue(published: Published) -> None:
    """Each notification's kind is catalogued, with its publisher, cause, version and items."""
    found = [text for who, note in published.notes for text in departures(who, note, published.log)]

    assert [] == found


def test_every_catalogue_entry_is_published(published: Published) -> None:
    """Each (kind, publisher, cause) the catalogue declares happens: it documents no fiction."""
    seen = {(note.kind, who, cause_of(note, published.log)) for who, note in published.notes}

    assert declared_entries() == seen
