"""Parameters, vectors and serialisation shared by the MemoryOS tiers (pure).

Serialisation contract, relied on by the SQL read models and the replay checksum:

- every state model dumps with ``to_dict()`` to a plain JSON-ready dict keyed by its field
  names, and loads back with ``from_dict()``; ``to_json()`` is the canonical text (sorted keys,
  no whitespace, ASCII only), so the same state always gives the same bytes;
- a vector is a string: base64 of its float32 components, little-endian, in order;
- a time is an ISO 8601 string in UTC (``2025-01-02T03:04:05.123456Z``); times are stored in
  UTC whatever offset they came with, so one instant always serialises the same way;
- tuples are JSON arrays in order, dicts are JSON objects.

States are projections: when a field changes, drop the read model and replay the log.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Generic, Protocol, Self, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    TypeAdapter,
    WithJsonSchema,
)

__all__ = [
    "DEFAULT_PARAMS",
    "DomainModel",
    "Embedded",
    "MemoryOsParams",
    "Ranked",
    "Stacked",
    "UtcDatetime",
    "Vector",
    "VectorField",
    "as_utc",
    "decode_vector",
    "encode_vector",
    "rank_by_similarity",
    "top_ranked",
    "unit_vector",
]

Vector = npt.NDArray[np.float32]

T = TypeVar("T")
E = TypeVar("E", bound="Embedded")

_WIRE_DTYPE = np.dtype("<f4")


class MemoryOsParams(BaseModel):
    """The MemoryOS knobs; the defaults are the paper's published values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    fifo_size: int = Field(default=7, ge=1, description="STM pages kept per conversation")
    theta: float = Field(default=0.6, description="Fscore a page needs to join a segment")
    max_segments: int = Field(default=200, ge=1, description="MTM segments kept per user")
    alpha: float = Field(default=1.0, description="heat weight of visits")
    beta: float = Field(default=1.0, description="heat weight of pages since last promotion")
    gamma: float = Field(default=1.0, description="heat weight of recency")
    mu: float = Field(default=1e7, gt=0, description="recency time constant, in seconds")
    tau: float = Field(default=5.0, description="heat above which a segment is promoted")
    top_m: int = Field(default=5, ge=1, description="segments retrieved per query")
    top_k: int = Field(default=10, ge=1, description="pages, facts and traits per query")
    knowledge_capacity: int = Field(default=100, ge=1, description="user facts kept")
    agent_traits_capacity: int = Field(default=100, ge=1, description="agent traits kept")
    # Not a paper parameter: Jaccard against a long keyword list shrinks towards 0, so a
    # segment keeps about as many keywords as a summary names, the most recent first.
    segment_keyword_capacity: int = Field(default=20, ge=1, description="keywords per segment")


DEFAULT_PARAMS = MemoryOsParams()


def unit_vector(values: npt.ArrayLike) -> Vector:
    """Return ``values`` as a read-only float32 vector of length one (zero stays zero)."""
    array = np.array(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"a vector must be one-dimensional, got shape {array.shape}")
    norm = float(np.linalg.norm(array))
    # A zero vector has no direction: keep it zero instead of dividing into NaN.
    unit = (array / norm if norm > 0 else array).astype(np.float32)
    unit.flags.writeable = False
    return unit


def _vector_from_wire(value: object) -> Vector:
    # Every stored segment, page and fact carries one: recall decodes a user's 200 segments
    # on their first question. The strict C decoder checks the alphabet that
    # ``b64decode(validate=True)`` checks with a regular expression first.
    if isinstance(value, str):
        array = np.frombuffer(binascii.a2b_base64(value, strict_mode=True), dtype=_WIRE_DTYPE)
    else:
        array = np.asarray(value)
    # Copy, so that freezing the vector never freezes an array the caller still holds.
    vector = np.array(array, dtype=np.float32, copy=True)
    if vector.ndim != 1:
        raise ValueError(f"a vector must be one-dimensional, got shape {vector.shape}")
    if not np.isfinite(vector).all():
        raise ValueError("a vector must hold finite numbers only")
    vector.flags.writeable = False
    return vector


def _vector_to_wire(vector: Vector) -> str:
    return base64.b64encode(np.asarray(vector, dtype=_WIRE_DTYPE).tobytes()).decode("ascii")


def as_utc(moment: datetime) -> datetime:
    """Return the aware ``moment`` in UTC; refuse a naive datetime, whose instant is unknown."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {moment.isoformat()}")
    return moment.astimezone(UTC)


VectorField = Annotated[
    Vector,
    PlainValidator(_vector_from_wire),
    PlainSerializer(_vector_to_wire, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "contentEncoding": "base64", "format": "float32-le"}),
]
UtcDatetime = Annotated[AwareDatetime, AfterValidator(as_utc)]

_vectors: TypeAdapter[Vector] = TypeAdapter(VectorField)


def decode_vector(text: str) -> Vector:
    """Return the unit vector a derived event or a row carries as base64 float32."""
    return _vectors.validate_python(text)


def encode_vector(vector: Vector) -> str:
    """Return the base64 float32 wire form of ``vector``."""
    return str(_vectors.dump_python(vector, mode="json"))


class DomainModel(BaseModel):
    """A frozen state or record of a MemoryOS tier, with the serialisation contract above."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=True
    )

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready dict of this state."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """Load a state from the dict ``to_dict`` made, validating it."""
        return cls.model_validate(data)

    def to_json(self) -> str:
        """Return the canonical JSON text of this state (what the replay checksum hashes)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> Self:
        """Load a state from JSON text, validating it."""
        return cls.model_validate_json(text)

    # Pydantic compares fields with ==, which is ambiguous for numpy arrays: compare the
    # serialised form instead, which is also what the replay checksum sees.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DomainModel) or type(other) is not type(self):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(self.to_json())


class Embedded(Protocol):
    """Anything ranked by vector similarity: a stable key and a unit vector."""

    @property
    def key(self) -> str: ...

    @property
    def vector(self) -> Vector: ...


@dataclass(frozen=True, slots=True)
class Ranked(Generic[T]):
    """An item with the score it was ranked by."""

    item: T
    score: float


def rank_by_similarity(query_vec: Vector, items: Sequence[E], top_k: int) -> list[Ranked[E]]:
    """Return the ``top_k`` items most similar to ``query_vec``, best first, ties by key."""
    return Stacked.of(items).rank(query_vec, top_k)


@dataclass(frozen=True, slots=True)
class Stacked(Generic[E]):
    """Items and their vectors stacked once, so each query ranks them with one product.

    Recall holds one per persona write (its facts) instead of stacking them per request.
    """

    items: tuple[E, ...]
    matrix: npt.NDArray[np.float32] | None

    @classmethod
    def of(cls, items: Sequence[E]) -> Stacked[E]:
        """Stack the items' vectors (None when there are no items)."""
        held = tuple(items)
        return cls(held, np.stack([item.vector for item in held]) if held else None)

    def rank(self, query_vec: Vector, top_k: int) -> list[Ranked[E]]:
        """Return the ``top_k`` items most similar to ``query_vec``, best first, ties by key."""
        if self.matrix is None or top_k < 1:
            return []
        scores = self.matrix @ np.asarray(query_vec, dtype=np.float32)
        return top_ranked(scores, self.items, top_k, lambda item: item.key)


def top_ranked(
    scores: npt.NDArray[Any], items: Sequence[T], top_k: int, key: Callable[[T], str]
) -> list[Ranked[T]]:
    """Return the ``top_k`` items by score, best first, ties by ``key`` (as a full sort would).

    Only the items scoring at least the ``top_k``-th best score are sorted in Python: every
    item a full sort would keep is among them, ties at the boundary included.
    """
    count = len(items)
    if count > top_k:
        threshold = np.partition(scores, count - top_k)[count - top_k]
        picked: Iterable[int] = np.flatnonzero(scores >= threshold).tolist()
    else:
        picked = range(count)
    ranked = [Ranked(items[index], float(scores[index])) for index in picked]
    ranked.sort(key=lambda entry: (-entry.score, key(entry.item)))
    return ranked[:top_k]
