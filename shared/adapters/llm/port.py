"""Define the LLM port: what the pipeline asks of a language model, and the answers' shapes.

Each answer is recorded in a derived event, so replay never asks again: the models here are
the recorded shapes and must stay backward compatible.
"""

from collections.abc import Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Continuity",
    "Entity",
    "EntityType",
    "Fact",
    "GraphExtraction",
    "LlmFailure",
    "MemoryLlm",
    "PageText",
    "PersonaExtraction",
    "Relation",
    "SegmentSummary",
]

EntityType = Literal["person", "place", "org", "thing"]


class _Answer(BaseModel):
    """Base of every model crossing the port: frozen, and lenient about numbers as text."""

    # A model answering JSON often writes an age or a year as a number; as text it is the same.
    model_config = ConfigDict(frozen=True, coerce_numbers_to_str=True)


class PageText(_Answer):
    """One dialogue page: what the user asked and what the agent answered."""

    query: str
    response: str


class Continuity(_Answer):
    """Whether a page continues the previous page's topic."""

    linked: bool


class SegmentSummary(_Answer):
    """The rewritten summary and keywords of a mid-term topic segment."""

    summary: str
    keywords: tuple[str, ...] = ()


class Fact(_Answer):
    """One fact about the user, e.g. attribute "location", value "Lisbon"."""

    attribute: str
    value: str
    text: str


class PersonaExtraction(_Answer):
    """What a run of pages says about the user, and what the user wants the agent to be."""

    profile: dict[str, str] = Field(default_factory=dict)
    facts: tuple[Fact, ...] = ()
    traits: dict[str, str] = Field(default_factory=dict)
    agent_traits: tuple[str, ...] = ()


class Entity(_Answer):
    """A named thing for the knowledge graph."""

    name: str
    type: EntityType = "thing"


class Relation(_Answer):
    """A directed, named edge between two entities of the knowledge graph."""

    source: str
    relation: str
    target: str


class GraphExtraction(_Answer):
    """The entities and relations found in a text."""

    entities: tuple[Entity, ...] = ()
    relations: tuple[Relation, ...] = ()


class LlmFailure(Exception):
    """An LLM step gave no usable answer: retries ran out, or the circuit is open."""

    def __init__(self, step: str, reason: str, attempts: int) -> None:
        super().__init__(f"LLM step {step!r} failed after {attempts} attempt(s): {reason}")
        self.step = step
        self.reason = reason
        self.attempts = attempts


@runtime_checkable
class MemoryLlm(Protocol):
    """The non-deterministic MemoryOS steps; every answer is recorded as a derived event."""

    @property
    def name(self) -> str:
        """Name the implementation for the events it decides, e.g. "offline-v1"."""
        ...

    async def check_continuity(self, previous: PageText | None, page: PageText) -> Continuity:
        """Say whether a page continues the previous page of the same conversation."""
        ...

    async def summarise_chain(self, pages: Sequence[PageText]) -> str:
        """Summarise a chain of linked short-term pages into its meta-chain text."""
        ...

    async def page_keywords(self, page: PageText) -> list[str]:
        """Return a page's keywords, most telling first."""
        ...

    async def summarise_segment(
        self, previous_summary: str, pages: Sequence[PageText]
    ) -> SegmentSummary:
        """Rewrite a segment's summary and keywords after pages join it."""
        ...

    async def extract_persona(self, pages: Sequence[PageText]) -> PersonaExtraction:
        """Extract the user's profile, facts, trait evidence and wishes for the agent."""
        ...

    async def extract_graph(self, text: str) -> GraphExtraction:
        """Extract entities and relations for the knowledge graph."""
        ...

    async def aclose(self) -> None:
        """Release the connections the implementation holds."""
        ...
