"""The recall request-reply contract."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints

from memoryd.shared.contracts.events import MAX_TEXT_CHARS, Category, MemoryType
from memoryd.shared.contracts.scope import Scope, SearchScope

# --- hybrid retrieval contracts ---------------------------------------------------
ItemKind = Literal["turn", "page", "segment", "fact", "memory"]


class RecallFilters(BaseModel):
    """Narrow hybrid retrieval; None means "any". Time window: ``after <= t < before``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kinds: tuple[ItemKind, ...] | None = Field(default=None, min_length=1)
    categories: tuple[Category, ...] | None = Field(default=None, min_length=1)
    memory_types: tuple[MemoryType, ...] | None = Field(default=None, min_length=1)
    occurred_after: AwareDatetime | None = None
    occurred_before: AwareDatetime | None = None


class StreamWeights(BaseModel):
    """The weight of each stream in reciprocal rank fusion; 0 turns a stream off.

    The graph's default is a quarter: at full weight its entity matches outvoted better BM25
    and dense ranks (LongMemEval-S dev recall_all@5 0.857 against 0.898 at 0.25, the same as
    BM25 + dense alone); at a quarter it still lifts LoCoMo turn recall (0.760 vs 0.757).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    bm25: float = Field(default=1.0, ge=0.0)
    dense: float = Field(default=1.0, ge=0.0)
    graph: float = Field(default=0.25, ge=0.0)


class StreamScore(BaseModel):
    """One stream's view of an item: its rank (1 = best) and raw score there."""

    model_config = ConfigDict(frozen=True)

    rank: int
    score: float


class Explanation(BaseModel):
    """How an item's final score was made (explain mode)."""

    model_config = ConfigDict(frozen=True)

    streams: dict[str, StreamScore]
    fused: float
    relevance: float
    decay: float
    importance: float
    recency: float
    composite: float


class RetrievedItem(BaseModel):
    """An item hybrid retrieval found, with its provenance."""

    model_config = ConfigDict(frozen=True)

    item_id: uuid.UUID
    kind: ItemKind
    text: str
    user_id: str | None
    agent_id: str | None
    session_id: str | None
    turn_id: str | None
    memory_id: str | None
    category: str | None
    importance: float
    evergreen: bool
    occurred_at: datetime
    score: float
    explanation: Explanation | None = None


class SessionHit(BaseModel):
    """A session ranked by the evidence it holds: the sum of its best keys' scores."""

    model_config = ConfigDict(frozen=True)

    session_id: str
    score: float


# --- the MemoryOS context (STM chain, MTM segments and pages, LPM persona) -------
class Provenance(BaseModel):
    """Where an item came from: the turns and sessions that stated it."""

    model_config = ConfigDict(frozen=True)

    turn_ids: tuple[uuid.UUID, ...] = ()
    session_ids: tuple[str, ...] = ()


class SegmentItem(BaseModel):
    """A mid-term topic segment ranked by Fscore against the query."""

    model_config = ConfigDict(frozen=True)

    segment_id: str
    summary: str
    keywords: tuple[str, ...]
    page_count: int
    heat: float
    score: float
    provenance: Provenance = Provenance()


class SegmentPageItem(BaseModel):
    """A page of a retrieved segment, ranked by similarity to the query."""

    model_config = ConfigDict(frozen=True)

    turn_id: uuid.UUID
    segment_id: str
    session_id: str | None
    agent_id: str
    query: str
    response: str
    occurred_at: datetime
    score: float


class FactItem(BaseModel):
    """A user knowledge fact or an agent trait, ranked by similarity to the query."""

    model_config = ConfigDict(frozen=True)

    text: str
    score: float
    learned_at: datetime
    provenance: Provenance


class ProfileItem(BaseModel):
    """A current profile attribute of the user."""

    model_config = ConfigDict(frozen=True)

    attribute: str
    value: str
    since: datetime
    provenance: Provenance


class TraitItem(BaseModel):
    """A user trait dimension with evidence."""

    model_config = ConfigDict(frozen=True)

    trait_id: str
    evidence: str
    count: int
    provenance: Provenance = Provenance()


class MemoryOsContext(BaseModel):
    """The MemoryOS tiers for a query: segments, their pages, and the persona.

    Each entry here is rendered in the response's ``context`` (and nothing else of the tiers
    is): the block has no copy of its own.
    """

    model_config = ConfigDict(frozen=True)

    segments: list[SegmentItem] = []
    segment_pages: list[SegmentPageItem] = []
    knowledge: list[FactItem] = []
    agent_traits: list[FactItem] = []
    profile: list[ProfileItem] = []
    traits: list[TraitItem] = []


class RecallOptions(BaseModel):
    """What a recall asks for: every field of ``RecallRequest`` but whose memory it reads.

    The HTTP API takes this as its body and binds the scope from the caller's token.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    query: Annotated[str, StringConstraints(max_length=MAX_TEXT_CHARS)] = ""
    search_scope: SearchScope = SearchScope.AGENT
    limit: int = Field(default=10, ge=1, le=100)
    max_tokens: int = Field(default=2_000, ge=1, le=200_000)
    include_pages: bool = True
    # --- hybrid retrieval options (all optional; defaults come from the service) ---
    filters: RecallFilters | None = None
    weights: StreamWeights | None = None
    rrf_k: int | None = Field(default=None, ge=1, le=1_000)
    max_per_session: int = Field(default=3, ge=1, le=100)
    min_score: float = Field(default=0.0, ge=0.0)
    explain: bool = False
    # "Now" for this request (default: the service clock): relative dates in the query ("two
    # weeks ago") and decay are reckoned from it, e.g. when an agent replays a past dialogue.
    as_of: AwareDatetime | None = None
    # The caller stops waiting at this instant (the SDK sets it from its timeout): a request
    # still queued then is dropped unworked and answered ``deadline_exceeded``. It assumes the
    # caller's clock and the service's agree (NTP); leave it unset to wait however long.
    deadline: AwareDatetime | None = None


class RecallRequest(RecallOptions):
    """Ask for the memory context that answers ``query`` for ``scope``."""

    scope: Scope


class PageItem(BaseModel):
    """A short-term dialogue page."""

    model_config = ConfigDict(frozen=True)

    turn_id: uuid.UUID
    session_id: str | None
    agent_id: str
    query: str
    response: str
    occurred_at: datetime
    meta_chain: str = ""  # the summary of the chain this page belongs to


class MemoryItem(BaseModel):
    """An explicit memory that matched the query."""

    model_config = ConfigDict(frozen=True)

    memory_id: uuid.UUID
    key: str | None
    content: str
    category: Category
    memory_type: MemoryType
    importance: float
    evergreen: bool
    metadata: dict[str, Any]
    user_id: str
    agent_id: str
    session_id: str | None
    created_at: datetime
    score: float


class RecallResponse(BaseModel):
    """The memory context: the structured items and ``context``, their one rendered block.

    The fields and the block agree: everything ``context`` shows is in a field, and every
    entry of a field is shown, section by section within ``max_tokens`` (``tokens``):
    ``pages`` under "Recent conversation", ``memories`` under "Memories", the turns of
    ``items`` not already among the pages under "Related conversation", then the MemoryOS
    tiers of ``memoryos`` (profile, knowledge, past topics and exchanges, traits, wishes for
    the agent). An ``items`` entry of kind "memory" is shown as its memory in ``memories``;
    a turn already among ``pages`` is shown as that page. What the budget trims leaves the
    fields too. ``sessions`` ranks the sessions the items came from (not rendered).
    """

    model_config = ConfigDict(frozen=True)

    ok: Literal[True] = True
    pages: list[PageItem]
    memories: list[MemoryItem]
    context: str
    tokens: int
    items: list[RetrievedItem] = []  # hybrid retrieval results, best first
    sessions: list[SessionHit] = []  # the sessions the items came from, best first
    memoryos: MemoryOsContext = MemoryOsContext()  # the MemoryOS tiers


RecallErrorCode = Literal[
    "invalid_request", "forbidden", "internal", "overloaded", "deadline_exceeded"
]


class RecallError(BaseModel):
    """A request the service could not answer, with the reason."""

    model_config = ConfigDict(frozen=True)

    ok: Literal[False] = False
    code: RecallErrorCode
    message: str


RecallReply = Annotated[RecallResponse | RecallError, Field(discriminator="ok")]
