"""Check the live read models and index against a fresh fold of the log.

Replay proves a fold of the log equals itself; ``verify`` proves the LIVE state equals it:
it folds the log, up to each projection's live position, into a scratch database and a scratch
index with the same projection code, then compares every table the projections own (row
count and checksum) and the index (point count and checksum per kind of key). A difference
names what was lost, doubled or corrupted.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from memoryd.services.runtime.projection import Projection
from memoryd.services.runtime.replay import fold, log_to_fold, owned_tables
from memoryd.shared.adapters.index.port import IndexPoint, SearchIndex
from memoryd.shared.adapters.sql import tracking
from memoryd.shared.adapters.sql.schema import create_schema, table_checksum

_SCROLL = 1_000
_VECTOR_DECIMALS = 5  # float32 noise stays below this; a different text does not


@dataclass(frozen=True, slots=True)
class Tally:
    """How many rows (or points) a read model holds, and a checksum of their content."""

    count: int
    checksum: str


@dataclass(frozen=True, slots=True)
class Scratch:
    """Where the fresh fold goes: its own database and (when the index is checked) index.

    ``projections`` are built on the scratch index, in replay mode (they make no decision).
    """

    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    projections: Sequence[Projection]
    index: SearchIndex | None = None


@dataclass(frozen=True)
class VerifyReport:
    """The live and the fresh tallies of every read model, and where they differ."""

    positions: dict[str, int]
    live: dict[str, Tally]
    fresh: dict[str, Tally]

    @property
    def differences(self) -> list[str]:
        """Return the read models whose live and fresh tallies differ."""
        names = sorted(set(self.live) | set(self.fresh))
        return [name for name in names if self.live.get(name) != self.fresh.get(name)]

    @property
    def equal(self) -> bool:
        """Say whether the live state is exactly the fold of the log."""
        return not self.differences

    def lines(self) -> list[str]:
        """Return a human-readable report: one line per read model, differences marked."""
        out = []
        for name in sorted(set(self.live) | set(self.fresh)):
            live, fresh = self.live.get(name), self.fresh.get(name)
            mark = "ok  " if live == fresh else "DIFF"
            out.append(f"{mark} {name}: live {_show(live)}, log {_show(fresh)}")
        return out


def _show(tally: Tally | None) -> str:
    return "absent" if tally is None else f"{tally.count} ({tally.checksum[:12]})"


async def tally_tables(engine: AsyncEngine, projections: Sequence[Projection]) -> dict[str, Tally]:
    """Return the tally of every table the projections own."""
    tallies = {}
    for table in owned_tables(projections):
        async with engine.connect() as conn:
            count = int(await conn.scalar(select(func.count()).select_from(table)) or 0)
        tallies[table.name] = Tally(count, await table_checksum(engine, table))
    return tallies


def key_kind(point: IndexPoint) -> str:
    """Return the kind of key a point is: ``turn/turn``, ``turn/window``, ``memory`` ..."""
    key = point.payload.extra.get("key") if point.payload.kind == "turn" else None
    return f"{point.payload.kind}/{key}" if isinstance(key, str) else point.payload.kind


def point_fingerprint(point: IndexPoint) -> dict[str, Any]:
    """Return what a point holds, in a form equal points share exactly."""
    return {
        "id": str(point.id),
        "text": point.text,
        "payload": point.payload.model_dump(mode="json"),
        "dense": [round(float(value), _VECTOR_DECIMALS) for value in point.dense],
    }


async def tally_index(index: SearchIndex) -> dict[str, Tally]:
    """Return the tally of the index per kind of key (``index:<kind>``)."""
    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    offset = None
    while True:
        points, offset = await index.scroll(offset, _SCROLL)
        for point in points:
            by_kind[f"index:{key_kind(point)}"].append(point_fingerprint(point))
        if offset is None:
            break
    tallies = {}
    for kind, fingerprints in by_kind.items():
        digest = hashlib.sha256()
        for fingerprint in sorted(fingerprints, key=lambda item: str(item["id"])):
            digest.update(json.dumps(fingerprint, sort_keys=True).encode())
        tallies[kind] = Tally(len(fingerprints), digest.hexdigest())
    return tallies


async def live_positions(
    sessions: async_sessionmaker[AsyncSession], projections: Sequence[Projection]
) -> dict[str, int]:
    """Return the stream sequence each projection has applied up to."""
    async with sessions() as session:
        return {p.consumer: await tracking.position(session, p.consumer) for p in projections}


async def verify(
    js: JetStreamContext,
    stream: str,
    live_engine: AsyncEngine,
    live_sessions: async_sessionmaker[AsyncSession],
    scratch: Scratch,
    *,
    live_index: SearchIndex | None = None,
) -> VerifyReport:
    """Fold the log into ``scratch`` up to the live positions and compare with the live state.

    Run it while the workers are stopped or idle: a worker that applies events meanwhile
    makes its tables differ from the positions read at the start.
    """
    positions = await live_positions(live_sessions, scratch.projections)
    events = await log_to_fold(js, stream, positions)
    await create_schema(scratch.engine)
    await fold(scratch.sessions, scratch.projections, events, positions)
    live = await tally_tables(live_engine, scratch.projections)
    fresh = await tally_tables(scratch.engine, scratch.projections)
    if live_index is not None and scratch.index is not None:
        live |= await tally_index(live_index)
        fresh |= await tally_index(scratch.index)
    return VerifyReport(positions, live, fresh)
