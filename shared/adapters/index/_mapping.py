"""Map the port's models to and from the shape both Qdrant adapters store and query."""

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

import numpy as np

from memoryd.shared.adapters.index.port import (
    DenseVector,
    Hit,
    IndexPayload,
    IndexPoint,
    ScopeFilter,
)
from memoryd.shared.adapters.index.stored import (
    DIGEST_KEY,
    TENANT_FIELD,
    TEXT_KEY,
    TIME_FIELD,
    Condition,
    InRange,
    MatchAny,
    content_digest,
    point_key,
)

Scored = tuple[Any, float, Any]  # a point id, its score, and its payload if read
Point = TypeVar("Point")
_EXACT_FIELDS = ("user_id", "agent_id", "session_id", "namespace")


def scope_conditions(scope: ScopeFilter) -> tuple[Condition, ...]:
    """Return the conditions a point must all meet to be in scope, the tenant's first."""
    conditions: list[Condition] = [MatchAny(TENANT_FIELD, (scope.tenant,))]
    for key in _EXACT_FIELDS:
        value: str | None = getattr(scope, key)
        if value is not None:
            conditions.append(MatchAny(key, (value,)))
    for key, values in (
        ("kind", scope.kinds),
        ("category", scope.categories),
        ("memory_type", scope.memory_types),
    ):
        if values is not None:
            conditions.append(MatchAny(key, tuple(values)))
    if scope.occurred_after is not None or scope.occurred_before is not None:
        conditions.append(InRange(TIME_FIELD, scope.occurred_after, scope.occurred_before))
    return tuple(conditions)


def stored_payload(point: IndexPoint, encoding: str) -> dict[str, Any]:
    """Return the JSON payload stored with a point: its scope fields, its text and its digest.

    ``encoding`` names the BM25 encoding the point's sparse vector is made with
    (``sparse.encoding``): the digest covers it, so it changes whenever anything stored for
    the point would, and it is known before the text is encoded.
    """
    payload = {**point.payload.model_dump(mode="json"), TEXT_KEY: point.text}
    payload[DIGEST_KEY] = content_digest(
        payload, np.asarray(point.dense, dtype=np.float32).tobytes(), encoding
    )
    return payload


def stored_digests(records: Iterable[Any]) -> dict[UUID, str | None]:
    """Return the digest each retrieved record holds, by id (None where it has none)."""
    return {point_key(record.id): (record.payload or {}).get(DIGEST_KEY) for record in records}


def changed(
    payloads: Sequence[Mapping[str, Any]], stored: Mapping[UUID, str | None], ids: Sequence[UUID]
) -> list[int]:
    """Return the positions of the points whose digest differs from the stored one (or none)."""
    return [
        position
        for position, (point_id, payload) in enumerate(zip(ids, payloads, strict=True))
        if stored.get(point_id) != payload[DIGEST_KEY]
    ]


def hit_from_stored(point_id: UUID | str | int, score: float, payload: Mapping[str, Any]) -> Hit:
    """Rebuild a search hit from what the engine returned.

    The payload is what ``stored_payload`` wrote (JSON of a validated ``IndexPayload``): it is
    rebuilt without validating it again (only the event id turns back into a UUID), which
    cost ~25 us a hit over the hundreds of candidates a recall reads.
    """
    identity, found, text = decoded(point_id, payload)
    return Hit(id=identity, score=score, payload=found, text=text)


Decoded = tuple[UUID, IndexPayload, str]


def decoded(point_id: UUID | str | int, payload: Mapping[str, Any]) -> Decoded:
    """Return a stored point's id, payload and text as a hit carries them."""
    fields = dict(payload)
    text = fields.pop(TEXT_KEY)
    fields.pop(DIGEST_KEY, None)  # points written before digests were stored have none
    source = fields.get("source_event_id")
    if source is not None:
        fields["source_event_id"] = UUID(str(source))
    return point_key(point_id), IndexPayload.model_construct(**fields), text


# A search asks the engine for one point past its limit, to see whether equal scores run
# across the cut; while they do, it asks for twice as many, up to this many points.
MOST_ASKED = 1_024
# Scores closer than this (relative) are equal. The engine sums a BM25 score's terms in float32
# in an order of its own, so one point's score differs between two builds of the same index by
# a few units in the last place: up to 1.9e-7 relative over LoCoMo's questions (two builds,
# 24,639 hits), while two different BM25 scores sit much further apart.
SAME_SCORE = 1e-5


def runs_of_equal(scores: Sequence[float]) -> list[int]:
    """Number the runs of equal scores in a best-first list: 0, 0, 1, 2, 2, ...

    A score is equal to the one before it when closer than ``SAME_SCORE`` of it; a run is a
    chain of such scores (a tie the engine's rounding has spread over a few last places).
    """
    runs: list[int] = []
    run = 0
    for position, score in enumerate(scores):
        if position and scores[position - 1] - score > SAME_SCORE * abs(scores[position - 1]):
            run += 1
        runs.append(run)
    return runs


def more_needed(scores: Sequence[float], limit: int, asked: int) -> bool:
    """Say whether a search must ask again for more than ``asked`` points to cut at ``limit``.

    ``scores`` are what the engine returned for ``asked``, best first. Among equal scores the
    engine's order is its own storage order, which differs between two builds of the same
    index (the batches points arrived in). When the cut and the end of the reply lie in one
    run of equal scores, points the engine left out may tie with the last one kept.
    """
    if not 0 < limit < len(scores) == asked < MOST_ASKED:
        return False
    runs = runs_of_equal(scores)
    return runs[-1] == runs[limit - 1]


async def past_the_cut(
    search: Callable[[int], Awaitable[Sequence[Point]]],
    score: Callable[[Point], float],
    limit: int,
) -> Sequence[Point]:
    """Return what ``search(n)`` finds for one point past ``limit``, or for as many more as a
    run of equal scores across the cut needs (``more_needed``): ``best_first`` then cuts."""
    asked = limit + 1
    while True:
        found = await search(asked)
        if not more_needed([score(point) for point in found], limit, asked):
            return found
        asked = min(2 * asked, MOST_ASKED)


def best_first(scored: Iterable[Scored], limit: int) -> list[Scored]:
    """Return the ``limit`` best (id, score, payload) triples: by score, equal scores by id.

    Every point of a run of equal scores (``runs_of_equal``) is given the run's best score. A
    search's answer is then a function of the index's contents alone: the same points in, the
    same hits in the same order out, however and in whatever batches they were written.
    """
    ordered = sorted(scored, key=lambda item: -item[1])
    runs = runs_of_equal([item[1] for item in ordered])
    best: dict[int, float] = {}
    for run, item in zip(runs, ordered, strict=True):
        best.setdefault(run, item[1])
    ranked = sorted(zip(runs, ordered, strict=True), key=lambda it: (it[0], point_key(it[1][0])))
    return [(item[0], best[run], item[2]) for run, item in ranked[:limit]]


class DecodedPoints:
    """Stored points decoded once, kept until a write touches them (an in-process index).

    Decoding a payload (~9 us) ran for every hit of every search: ~100 a recall. A search
    keeps what it decoded only when no write began or ended while it ran (``epoch``), so a
    payload read before a write is never kept past it. Bounded: past ``max_points`` it is
    emptied and fills again.
    """

    def __init__(self, max_points: int = 50_000) -> None:
        """Keep at most ``max_points`` decoded points."""
        self._max_points = max_points
        self._points: dict[UUID, Decoded] = {}
        self.epoch = 0

    def __len__(self) -> int:
        """Return how many points are held."""
        return len(self._points)

    def missing(self, point_ids: Iterable[Any]) -> list[Any]:
        """Return the ids whose decoded payload is not held (a search then reads only those)."""
        return [point_id for point_id in point_ids if point_key(point_id) not in self._points]

    def hits(
        self,
        scored: Iterable[tuple[Any, float, Mapping[str, Any] | None]],
        started: int | None = None,
    ) -> list[Hit]:
        """Return hits for (id, score, payload) triples, decoding only the points not held.

        ``started`` is the ``epoch`` before the search ran (default: now). A point neither
        held nor given a payload (deleted since the search) is left out.
        """
        started = self.epoch if started is None else started
        fresh: dict[UUID, Decoded] = {}
        hits = []
        for point_id, score, payload in scored:
            key = point_key(point_id)
            held = self._points.get(key) or fresh.get(key)
            if held is None:
                if payload is None:
                    continue
                held = fresh[key] = decoded(point_id, payload)
            identity, found, text = held
            hits.append(Hit(id=identity, score=score, payload=found, text=text))
        if fresh and self.epoch == started:
            if len(self._points) + len(fresh) > self._max_points:
                self._points.clear()
            self._points.update(fresh)
        return hits

    def written(self, ids: Iterable[UUID | str | int] | None = None) -> None:
        """Forget the points a write touches (None: every point); call before and after it."""
        self.epoch += 1
        if ids is None:
            self._points.clear()
            return
        for point_id in ids:
            self._points.pop(point_key(point_id), None)


def point_from_stored(
    point_id: UUID | str | int, dense: Sequence[float], payload: Mapping[str, Any]
) -> IndexPoint:
    """Rebuild a stored point (its dense vector as the engine keeps it, normalised)."""
    fields = dict(payload)
    text = fields.pop(TEXT_KEY)
    fields.pop(DIGEST_KEY, None)
    return IndexPoint(
        id=UUID(str(point_id)),
        dense=list(dense),
        text=text,
        payload=IndexPayload.model_validate(fields),
    )


def dense_values(vector: DenseVector, dimension: int) -> list[float]:
    """Return the vector as a list of floats, refusing a wrong dimension or a non-finite value."""
    values: list[float] = _checked(vector, dimension).tolist()
    return values


def dense_bytes(vector: DenseVector, dimension: int) -> bytes:
    """Return the vector's float32 bytes, as ``dense_values`` checks it.

    Straight from the array: through a list of floats it cost 13.6 us a point against 2.6
    (the 4,100 points a replay of 5,700 events lays out: 56 against 11 ms).
    """
    return _checked(vector, dimension).tobytes()


def _checked(vector: DenseVector, dimension: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    array = np.ascontiguousarray(vector, dtype=np.float32)
    if array.shape != (dimension,):
        raise ValueError(f"dense vector must have shape ({dimension},), got {array.shape}")
    if not np.isfinite(array).all():
        raise ValueError("dense vector holds a NaN or an infinity")
    return array
