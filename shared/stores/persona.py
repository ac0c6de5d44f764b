"""The LPM persona read model: one row per user (profile, knowledge, traits, agent traits)
and the provenance of each extraction (the turns and sessions its facts came from)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.shared.adapters.sql.tables import lpm_extractions, lpm_personas
from memoryd.shared.adapters.sql.upsert import upsert
from memoryd.shared.contracts.memoryos import PersonaExtracted
from memoryd.shared.contracts.recall import Provenance
from memoryd.shared.domain import lpm

TABLES = (lpm_personas, lpm_extractions)

UserKey = tuple[str, str]  # (tenant, user_id)


@dataclass
class Persona:
    """Everything LPM holds about one user."""

    profile: lpm.Profile = field(default_factory=lpm.Profile)
    knowledge: lpm.KnowledgeBase = field(default_factory=lpm.KnowledgeBase)
    traits: lpm.Traits = field(default_factory=lpm.Traits)
    agent_traits: lpm.AgentTraits = field(default_factory=lpm.AgentTraits)

    def row(self, key: UserKey) -> dict[str, str]:
        """Return the SQL row of this persona."""
        return {
            "tenant": key[0],
            "user_id": key[1],
            "profile": self.profile.to_json(),
            "knowledge": self.knowledge.to_json(),
            "traits": self.traits.to_json(),
            "agent_traits": self.agent_traits.to_json(),
        }


def persona_from_row(row: Mapping[str, Any]) -> Persona:
    """Load a persona from its SQL row."""
    return Persona(
        profile=lpm.Profile.from_json(row["profile"]),
        knowledge=lpm.KnowledgeBase.from_json(row["knowledge"]),
        traits=lpm.Traits.from_json(row["traits"]),
        agent_traits=lpm.AgentTraits.from_json(row["agent_traits"]),
    )


async def load_persona(session: AsyncSession, key: UserKey) -> Persona:
    """Return a user's persona, empty when nothing was learned yet."""
    rows = await session.execute(
        select(lpm_personas).where(
            lpm_personas.c.tenant == key[0], lpm_personas.c.user_id == key[1]
        )
    )
    row = rows.first()
    return Persona() if row is None else persona_from_row(dict(row._mapping))


def extraction_row(event: PersonaExtracted) -> dict[str, object]:
    """Return the provenance row of an extraction."""
    return {
        "event_id": event.event_id,
        "tenant": event.scope.tenant,
        "user_id": event.scope.user_id,
        "segment_id": event.segment_id,
        "turn_ids": [str(turn_id) for turn_id in event.turn_ids],
        "session_ids": list(event.session_ids),
    }


async def save(
    session: AsyncSession,
    personas: Mapping[UserKey, Persona],
    extractions: Iterable[PersonaExtracted],
) -> None:
    """Write the changed personas and the provenance of the extractions folded into them."""
    await upsert(
        session, lpm_personas, [p.row(k) for k, p in personas.items()], ["tenant", "user_id"]
    )
    await upsert(session, lpm_extractions, [extraction_row(e) for e in extractions], ["event_id"])


async def load_provenance(session: AsyncSession, sources: set[str]) -> dict[str, Provenance]:
    """Return the turns and sessions behind each persona extraction id."""
    ids = [uuid.UUID(source) for source in sources if _is_uuid(source)]
    if not ids:
        return {}
    rows = await session.execute(select(lpm_extractions).where(lpm_extractions.c.event_id.in_(ids)))
    return {
        str(row.event_id): Provenance(
            turn_ids=tuple(uuid.UUID(t) for t in row.turn_ids),
            session_ids=tuple(row.session_ids),
        )
        for row in rows
    }


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
