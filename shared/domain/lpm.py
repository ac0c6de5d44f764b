"""Long-term persona memory: profile, knowledge base, traits and agent traits (pure).

- ``Profile``: attribute -> current value with its source event and time; a replaced value
  moves to ``history``, never silently lost. The value with the later time is current.
- ``KnowledgeBase`` (user facts) and ``AgentTraits``: FIFOs of facts, the same fact text kept
  once, the oldest evicted first and handed back so the caller can record the eviction.
- ``Traits``: per trait id (the dimensions of ``traits.toml``), how many events gave evidence
  and the latest evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TypeVar

from pydantic import Field

from memoryd.shared.domain.memoryos import (
    DomainModel,
    UtcDatetime,
    VectorField,
    as_utc,
    rank_by_similarity,
)

__all__ = [
    "AgentTraits",
    "Fact",
    "FactFifo",
    "KnowledgeBase",
    "Profile",
    "ProfileEntry",
    "ReplacedEntry",
    "TraitEvidence",
    "Traits",
    "add_facts",
    "apply_fact",
    "apply_trait_evidence",
    "clear_attribute",
    "fact_identity",
    "rank_by_similarity",
]


class ProfileEntry(DomainModel):
    """The current value of a profile attribute and where it came from."""

    value: str
    at: UtcDatetime
    source: str = Field(description="id of the event that stated the value")


class ReplacedEntry(DomainModel):
    """A value an attribute no longer has, and what superseded it."""

    attribute: str
    value: str
    at: UtcDatetime
    source: str
    replaced_at: UtcDatetime
    replaced_by: str = Field(description="id of the event that superseded the value")


class Profile(DomainModel):
    """Static attributes of a user (or of an agent), with the values they replaced."""

    attributes: dict[str, ProfileEntry] = Field(default_factory=dict)
    history: tuple[ReplacedEntry, ...] = Field(default=(), description="oldest first")


def _retire(
    profile: Profile, attribute: str, entry: ProfileEntry, at: datetime, by: str
) -> tuple[ReplacedEntry, ...]:
    record = ReplacedEntry(
        attribute=attribute,
        value=entry.value,
        at=entry.at,
        source=entry.source,
        replaced_at=at,
        replaced_by=by,
    )
    # Redelivered events must not duplicate history.
    return profile.history if record in profile.history else (*profile.history, record)


def apply_fact(profile: Profile, attribute: str, value: str, at: datetime, source: str) -> Profile:
    """Set ``attribute`` to ``value``; whichever value is later stays, the other goes to history.

    Restating the current value changes nothing. A value older than the current one (a
    late event) goes straight to history, superseded by the current value.
    """
    current = profile.attributes.get(attribute)
    if current is not None and current.value == value:
        return profile
    incoming = ProfileEntry(value=value, at=at, source=source)
    if current is not None and incoming.at < current.at:
        history = _retire(profile, attribute, incoming, current.at, current.source)
        return profile.model_copy(update={"history": history})
    history = profile.history
    if current is not None:
        history = _retire(profile, attribute, current, incoming.at, source)
    attributes = {**profile.attributes, attribute: incoming}
    return profile.model_copy(update={"attributes": attributes, "history": history})


def clear_attribute(profile: Profile, attribute: str, at: datetime, source: str) -> Profile:
    """Remove ``attribute``; its value goes to history, superseded by ``source``."""
    current = profile.attributes.get(attribute)
    if current is None:
        return profile
    history = _retire(profile, attribute, current, as_utc(at), source)
    attributes = {name: entry for name, entry in profile.attributes.items() if name != attribute}
    return profile.model_copy(update={"attributes": attributes, "history": history})


class Fact(DomainModel):
    """A fact about the user or the agent, with its unit vector for ranking."""

    text: str
    vector: VectorField
    at: UtcDatetime
    source: str = Field(description="id of the event the fact was extracted from")

    @property
    def key(self) -> str:
        """Return the text, the key ties are broken by."""
        return self.text


class FactFifo(DomainModel):
    """A bounded FIFO of facts, oldest first."""

    facts: tuple[Fact, ...] = ()


class KnowledgeBase(FactFifo):
    """The user's knowledge base: facts learned about the user."""


class AgentTraits(FactFifo):
    """What the agent showed of itself: its traits and knowledge."""


F = TypeVar("F", bound=FactFifo)


def fact_identity(text: str) -> str:
    """Return what makes two fact texts the same fact: case and spacing do not count."""
    return " ".join(text.split()).casefold()


def add_facts(store: F, facts: Iterable[Fact], *, capacity: int) -> tuple[F, tuple[Fact, ...]]:
    """Append the facts not already held; return the new store and the facts evicted.

    Evicted facts are the oldest beyond ``capacity``, oldest first; they can include new
    facts when more than ``capacity`` arrive at once.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be at least 1, got {capacity}")
    held = {fact_identity(fact.text) for fact in store.facts}
    added: list[Fact] = []
    for fact in facts:
        identity = fact_identity(fact.text)
        if identity not in held:
            held.add(identity)
            added.append(fact)
    kept = (*store.facts, *added)
    overflow = max(0, len(kept) - capacity)
    return store.model_copy(update={"facts": kept[overflow:]}), kept[:overflow]


class TraitEvidence(DomainModel):
    """What is known of one trait: how many events showed it, and the latest evidence."""

    count: int = Field(ge=1)
    latest: str
    at: UtcDatetime
    source: str = Field(description="id of the event that gave the latest evidence")


class Traits(DomainModel):
    """The user's traits, by trait id."""

    dimensions: dict[str, TraitEvidence] = Field(default_factory=dict)


def apply_trait_evidence(
    traits: Traits, evidence: Mapping[str, str], *, at: datetime, source: str
) -> Traits:
    """Count the evidence of each trait and keep the latest in time; blank evidence is ignored.

    Evidence from the event that gave a trait's latest evidence is not counted twice.
    """
    moment = as_utc(at)
    dimensions = dict(traits.dimensions)
    for trait_id, raw in evidence.items():
        text = raw.strip()
        previous = dimensions.get(trait_id)
        if not text or (previous is not None and previous.source == source):
            continue
        dimensions[trait_id] = _with_evidence(previous, text, moment, source)
    return traits.model_copy(update={"dimensions": dimensions})


def _with_evidence(
    previous: TraitEvidence | None, text: str, at: datetime, source: str
) -> TraitEvidence:
    if previous is None:
        return TraitEvidence(count=1, latest=text, at=at, source=source)
    if at < previous.at:
        # A late event still counts, but does not displace newer evidence.
        return previous.model_copy(update={"count": previous.count + 1})
    return TraitEvidence(count=previous.count + 1, latest=text, at=at, source=source)
