"""Mid-term memory: topic segments of pages, their heat, promotion and eviction (pure).

A page joins the segment with the best ``Fscore = cos + Jaccard`` when that reaches theta,
else it opens a segment. ``Heat = alpha*N_visit + beta*L_interaction + gamma*exp(-dt/mu)``
orders segments for eviction; promotion to LPM uses the heat earned since the segment's last
promotion, so a segment is promoted once per burst of new activity (see ``promotion_heat``),
and only with pages filed since its last promotion (``should_promote``).
All times are aware datetimes passed in by the caller: nothing here reads a clock.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import Field

from memoryd.shared.domain.memoryos import (
    DEFAULT_PARAMS,
    DomainModel,
    Embedded,
    MemoryOsParams,
    Ranked,
    UtcDatetime,
    Vector,
    VectorField,
    as_utc,
    rank_by_similarity,
    top_ranked,
    unit_vector,
)

__all__ = [
    "FilingTable",
    "PageRef",
    "Segment",
    "SegmentChoice",
    "SegmentIndex",
    "after_promotion",
    "choose_segment",
    "coldest",
    "file_page",
    "fscore",
    "heat",
    "jaccard",
    "open_segment",
    "promotion_heat",
    "rank_pages",
    "rank_segments",
    "recency",
    "rewrite_summary",
    "segments_to_evict",
    "should_promote",
    "visit",
]

P = TypeVar("P", bound=Embedded)


class Segment(DomainModel):
    """A topic segment of MTM: the pages filed under one topic, and how hot it is."""

    id: str
    vector: VectorField = Field(description="unit direction of the mean of the page vectors")
    mean_norm: float = Field(ge=0, description="length of that mean before renormalising")
    summary: str = ""
    keywords: tuple[str, ...] = Field(default=(), description="most recently seen first")
    page_count: int = Field(default=0, ge=0)
    n_visit: int = Field(default=0, ge=0, description="times retrieval used this segment")
    l_interaction: int = Field(default=0, ge=0, description="pages filed since last promotion")
    last_visit_at: UtcDatetime
    created_at: UtcDatetime
    promoted_count: int = Field(default=0, ge=0)
    visits_at_promotion: int = Field(default=0, ge=0, description="n_visit when last promoted")

    @property
    def key(self) -> str:
        """Return the id, the key ties are broken by."""
        return self.id


class PageRef(DomainModel):
    """A page filed in MTM, as retrieval ranks it: its id, its segment and its unit vector."""

    page_id: str
    segment_id: str
    vector: VectorField

    @property
    def key(self) -> str:
        """Return the page id, the key ties are broken by."""
        return self.page_id


@dataclass(frozen=True, slots=True)
class SegmentChoice:
    """Where a page goes: ``segment_id`` None means it opens a new segment.

    ``score`` is the best Fscore found (None when there was no segment to compare with).
    """

    segment_id: str | None
    score: float | None

    @property
    def is_new(self) -> bool:
        """Return whether the page opens a new segment."""
        return self.segment_id is None


def jaccard(left: Collection[str], right: Collection[str]) -> float:
    """Return |left & right| / |left | right|, 0 when both are empty."""
    left_set, right_set = set(left), set(right)
    union = len(left_set | right_set)
    return len(left_set & right_set) / union if union else 0.0


def keyword_jaccards(
    words: set[str], postings: Mapping[str, Collection[int]], sizes: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """Return each row's Jaccard with ``words``, from the rows holding each keyword
    (``postings``) and each row's count of distinct keywords (``sizes``): the same values as
    ``jaccard`` row by row, in one pass over the few ``words``."""
    shared = np.zeros(len(sizes), dtype=np.int64)
    for word in words:
        holding = postings.get(word)
        if holding:
            shared[list(holding)] += 1
    union = sizes + len(words) - shared
    jaccards = np.zeros(len(sizes), dtype=np.float64)
    np.divide(shared, union, out=jaccards, where=union > 0)
    return jaccards


def fscore(
    segment_vec: Vector,
    segment_keywords: Collection[str],
    page_vec: Vector,
    page_keywords: Collection[str],
) -> float:
    """Return the cosine of the unit vectors plus the Jaccard of the keyword sets."""
    return float(np.dot(segment_vec, page_vec)) + jaccard(segment_keywords, page_keywords)


def choose_segment(
    page_vec: Vector,
    page_keywords: Collection[str],
    segments: Iterable[Segment],
    theta: float = DEFAULT_PARAMS.theta,
) -> SegmentChoice:
    """Pick the segment with the best Fscore (ties: smallest id) if it reaches ``theta``.

    The cosines are one product of the stacked segment vectors (rounded as ``SegmentIndex``
    rounds them, which may differ from one ``fscore`` at a time in the last bits).
    """
    table = FilingTable()
    table.sync({segment.id: segment for segment in segments})
    return table.choose(page_vec, page_keywords, theta)


class FilingTable:
    """One user's segments arranged for filing pages, kept from one page to the next.

    Stacking every segment's vector and building every keyword set for each page was a third
    of MTM's filing time with a user's 200 segments (py-spy, ``bench peers``, 3,000 turns in
    one scope). Here each segment's row and keyword postings are refreshed only when the
    segment changed; segments are frozen, so one that is still the object last synced has not
    (``sync`` compares identities, whatever changed the mapping). A page's Fscores are one
    matrix product and a pass over its own few keywords, as ``SegmentIndex`` ranks: a Jaccard
    per segment in Python was 6% of MTM's filing (200 segments). A table kept through any
    sequence of changes chooses as one built afresh (property-tested).
    """

    def __init__(self) -> None:
        """Start empty: ``sync`` fills it."""
        self._synced: dict[str, Segment] = {}
        self._rows: dict[str, int] = {}
        self._ids: list[str] = []
        # Tuples, not sets: the collector stops tracking a tuple of strings or ints, and never a
        # set. A worker holds a table for each user it files pages for, and the postings' sets
        # were half the objects its full collections walked (34,000 of 82,000 after 30 users
        # x 1,000 turns; docs/performance.md, session 46).
        self._keywords: list[tuple[str, ...]] = []
        self._postings: dict[str, tuple[int, ...]] = {}  # keyword -> the rows holding it
        self._matrix: npt.NDArray[np.float32] | None = None
        self._sizes: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)  # keywords per row

    def __len__(self) -> int:
        """Return how many segments the table holds."""
        return len(self._ids)

    def sync(self, segments: Mapping[str, Segment]) -> None:
        """Make the table hold exactly ``segments``, refreshing the changed ones."""
        for gone in [sid for sid in self._synced if sid not in segments]:
            self._remove(gone)
        for segment in segments.values():
            if self._synced.get(segment.id) is not segment:
                self._put(segment)

    def choose(
        self, page_vec: Vector, page_keywords: Collection[str], theta: float
    ) -> SegmentChoice:
        """Return ``choose_segment``'s choice among the synced segments: the best Fscore
        (cosine + Jaccard, the scores ``fscore`` gives), ties by the smallest id."""
        count = len(self._ids)
        if not count or self._matrix is None:
            return SegmentChoice(segment_id=None, score=None)
        cosines = self._matrix[:count] @ np.asarray(page_vec)
        jaccards = keyword_jaccards(set(page_keywords), self._postings, self._sizes[:count])
        scores = cosines.astype(np.float64) + jaccards
        best = scores.max()
        segment_id = min(self._ids[row] for row in np.flatnonzero(scores == best))
        score = float(best)
        return SegmentChoice(segment_id=segment_id if score >= theta else None, score=score)

    def _put(self, segment: Segment) -> None:
        row = self._rows.get(segment.id)
        if row is None:
            row = len(self._ids)
            self._ids.append(segment.id)
            self._keywords.append(())
            self._rows[segment.id] = row
        matrix = self._room(row + 1, len(segment.vector))
        matrix[row] = segment.vector
        self._post(row, tuple(dict.fromkeys(segment.keywords)))
        self._synced[segment.id] = segment

    def _remove(self, segment_id: str) -> None:
        row = self._rows.pop(segment_id)
        del self._synced[segment_id]
        last = len(self._ids) - 1
        self._post(row, ())
        if row != last and self._matrix is not None:  # the last row fills the hole
            moved = self._keywords[last]
            self._post(last, ())
            self._ids[row] = self._ids[last]
            self._matrix[row] = self._matrix[last]
            self._post(row, moved)
            self._rows[self._ids[row]] = row
        self._ids.pop()
        self._keywords.pop()

    def _post(self, row: int, keywords: tuple[str, ...]) -> None:
        """Make ``keywords`` (distinct) the row's keywords, in the postings and the sizes."""
        before, after = set(self._keywords[row]), set(keywords)
        for word in before - after:
            holding = tuple(held for held in self._postings[word] if held != row)
            if holding:
                self._postings[word] = holding
            else:
                del self._postings[word]
        for word in after - before:
            self._postings[word] = (*self._postings.get(word, ()), row)
        self._keywords[row] = keywords
        self._sizes[row] = len(keywords)

    def _room(self, rows: int, dimension: int) -> npt.NDArray[np.float32]:
        """Return the matrix with room for ``rows`` rows (doubling as it grows), the sizes too."""
        matrix = self._matrix
        if matrix is not None and matrix.shape[1] != dimension:
            raise ValueError(
                f"a segment vector has {dimension} dimensions, the others {matrix.shape[1]}"
            )
        if matrix is None or len(matrix) < rows:
            size = max(rows, 2 * (0 if matrix is None else len(matrix)))
            grown = np.zeros((size, dimension), dtype=np.float32)
            sizes = np.zeros(size, dtype=np.int64)
            if matrix is not None:
                grown[: len(matrix)] = matrix
                sizes[: len(matrix)] = self._sizes
            self._matrix = matrix = grown
            self._sizes = sizes
        return matrix


def _merge_keywords(recent: Iterable[str], older: Sequence[str], capacity: int) -> tuple[str, ...]:
    # Sorted so a set of keywords merges the same way whatever its iteration order (which
    # varies between processes), keeping replay deterministic.
    merged = dict.fromkeys([*sorted(set(recent)), *older])
    return tuple(merged)[:capacity]


def open_segment(
    segment_id: str,
    page_vec: Vector,
    page_keywords: Iterable[str],
    now: datetime,
    params: MemoryOsParams = DEFAULT_PARAMS,
) -> Segment:
    """Start a segment holding one page."""
    empty = Segment(
        id=segment_id,
        vector=np.zeros(len(page_vec), dtype=np.float32),
        mean_norm=0.0,
        last_visit_at=now,
        created_at=now,
    )
    return file_page(empty, page_vec, page_keywords, now, params)


def file_page(
    segment: Segment,
    page_vec: Vector,
    page_keywords: Iterable[str],
    now: datetime,
    params: MemoryOsParams = DEFAULT_PARAMS,
) -> Segment:
    """Add a page: the vector becomes the running mean, the keywords merge, L_interaction + 1.

    Filing counts as an access for recency (last_visit_at = now), as in MemoryOS: a segment
    that is being written to is not stale.
    """
    if page_vec.shape != segment.vector.shape:
        raise ValueError(
            f"page vector has shape {page_vec.shape}, segment {segment.id} has "
            f"{segment.vector.shape}"
        )
    mean = _mean_with(segment, page_vec)
    return segment.model_copy(
        update={
            "vector": unit_vector(mean),
            "mean_norm": float(np.linalg.norm(mean)),
            "keywords": _merge_keywords(
                page_keywords, segment.keywords, params.segment_keyword_capacity
            ),
            "page_count": segment.page_count + 1,
            "l_interaction": segment.l_interaction + 1,
            "last_visit_at": as_utc(now),
        }
    )


def _mean_with(segment: Segment, page_vec: Vector) -> npt.NDArray[np.float64]:
    # The stored unit vector times its stored length is the exact mean of the page vectors.
    count = segment.page_count
    return (segment.vector.astype(np.float64) * segment.mean_norm * count + page_vec) / (count + 1)


def rewrite_summary(
    segment: Segment,
    summary: str,
    keywords: Iterable[str],
    params: MemoryOsParams = DEFAULT_PARAMS,
) -> Segment:
    """Replace the summary and keywords with a rewritten pair (the vector stays the mean)."""
    ordered = tuple(dict.fromkeys(keywords))[: params.segment_keyword_capacity]
    return segment.model_copy(update={"summary": summary, "keywords": ordered})


def visit(segment: Segment, now: datetime) -> Segment:
    """Record that retrieval used the segment: N_visit + 1, last visit now."""
    return segment.model_copy(update={"n_visit": segment.n_visit + 1, "last_visit_at": as_utc(now)})


def recency(segment: Segment, now: datetime, mu: float = DEFAULT_PARAMS.mu) -> float:
    """Return exp(-dt/mu), dt the seconds since the last visit."""
    # Clamped at 0: producers' clocks disagree a little, and a visit "in the future" must
    # not make a segment hotter than a visit right now.
    elapsed = max(0.0, (now - segment.last_visit_at).total_seconds())
    return math.exp(-elapsed / mu)


def heat(segment: Segment, now: datetime, params: MemoryOsParams = DEFAULT_PARAMS) -> float:
    """Return alpha*N_visit + beta*L_interaction + gamma*recency."""
    return (
        params.alpha * segment.n_visit
        + params.beta * segment.l_interaction
        + params.gamma * recency(segment, now, params.mu)
    )


def promotion_heat(
    segment: Segment, now: datetime, params: MemoryOsParams = DEFAULT_PARAMS
) -> float:
    """Return the heat earned since the last promotion (the heat itself before the first).

    The paper resets only L_interaction on promotion; visits would then keep a much-visited
    segment above tau and promote it again on every later page, so visits made before the
    last promotion do not count towards the next one.
    """
    return heat(segment, now, params) - params.alpha * segment.visits_at_promotion


def should_promote(
    segment: Segment, now: datetime, params: MemoryOsParams = DEFAULT_PARAMS
) -> bool:
    """Return whether the segment is hot enough to be promoted to LPM, with pages to promote.

    A promotion hands LPM the pages filed since the last one (L_interaction of them): with
    none, it has nothing to hand over. Visits alone then wait, still counted, for the
    segment's next page. Without this, recall's visits re-promoted the same segments over
    and over: 600 recalls of one user at 5,000 turns made 441 promotions and 379 persona
    extractions of nothing new, ~70 every ten seconds, each a transaction's worth of work
    beside the recalls and events in the log.
    """
    return segment.l_interaction > 0 and promotion_heat(segment, now, params) > params.tau


def after_promotion(segment: Segment) -> Segment:
    """Mark the segment promoted: L_interaction back to 0 and its visits so far spent."""
    return segment.model_copy(
        update={
            "l_interaction": 0,
            "promoted_count": segment.promoted_count + 1,
            "visits_at_promotion": segment.n_visit,
        }
    )


def _coldness(segment: Segment, now: datetime, params: MemoryOsParams) -> tuple[float, float, str]:
    return (heat(segment, now, params), segment.created_at.timestamp(), segment.id)


def coldest(
    segments: Iterable[Segment], now: datetime, params: MemoryOsParams = DEFAULT_PARAMS
) -> Segment:
    """Return the segment with the least heat (ties: the oldest, then the smallest id)."""
    candidates = list(segments)
    if not candidates:
        raise ValueError("no segment to choose from")
    return min(candidates, key=lambda segment: _coldness(segment, now, params))


def segments_to_evict(
    segments: Iterable[Segment], now: datetime, params: MemoryOsParams = DEFAULT_PARAMS
) -> list[Segment]:
    """Return the coldest segments beyond ``max_segments``, coldest first."""
    held = list(segments)
    excess = len(held) - params.max_segments
    if excess <= 0:
        return []  # the heat of every segment is not needed
    return heapq.nsmallest(excess, held, key=lambda segment: _coldness(segment, now, params))


def rank_segments(
    query_vec: Vector,
    query_keywords: Collection[str],
    segments: Iterable[Segment],
    top_m: int = DEFAULT_PARAMS.top_m,
) -> list[Ranked[Segment]]:
    """Return the ``top_m`` segments by Fscore against the query, best first, ties by id."""
    return SegmentIndex.of(segments).rank(query_vec, query_keywords, top_m)


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """A user's segments arranged for ranking: vectors stacked, keywords posted.

    Built once per write of the segments; a query then costs one matrix product (the
    cosines) and a pass over its own few keywords (the Jaccards), whatever the number of
    segments. Scores are the ones ``fscore`` gives, to the bit.
    """

    segments: tuple[Segment, ...]
    matrix: npt.NDArray[np.float32] | None
    sizes: npt.NDArray[np.int64]  # distinct keywords of each segment
    # keyword -> the segments holding it: tuples, made into an index only for the query's few
    # words (an array per keyword was 1.2 of the 2.8 ms that indexing 200 segments took)
    postings: Mapping[str, tuple[int, ...]]

    @classmethod
    def of(cls, segments: Iterable[Segment], previous: SegmentIndex | None = None) -> SegmentIndex:
        """Index the segments; reuse ``previous``'s arrays if it indexed the same segments.

        Only a segment's id, vector and keywords go into the arrays: a visit (heat) or a new
        summary changes none of them, and the index of segments changed so is ``previous``'s
        arrays with the new segments (their rebuild was ~0.7 ms of a user's 200 segments).
        """
        held = tuple(segments)
        if previous is not None and previous.indexes(held):
            return cls(held, previous.matrix, previous.sizes, previous.postings)
        keyword_sets = [set(segment.keywords) for segment in held]
        posted: dict[str, list[int]] = {}
        for index, words in enumerate(keyword_sets):
            for word in words:
                posted.setdefault(word, []).append(index)
        return cls(
            held,
            np.stack([segment.vector for segment in held]) if held else None,
            np.array([len(words) for words in keyword_sets], dtype=np.int64),
            {word: tuple(found) for word, found in posted.items()},
        )

    def indexes(self, segments: Sequence[Segment]) -> bool:
        """Say whether ``segments`` are this index's segments in its order, with the same
        vectors and keywords (whatever their heat, summary or page count)."""
        return len(segments) == len(self.segments) and all(
            new is old
            or (
                new.id == old.id
                and new.keywords == old.keywords
                and np.array_equal(new.vector, old.vector)
            )
            for new, old in zip(segments, self.segments, strict=True)
        )

    def rank(
        self, query_vec: Vector, query_keywords: Collection[str], top_m: int
    ) -> list[Ranked[Segment]]:
        """Return the ``top_m`` segments by Fscore against the query, best first, ties by id."""
        if self.matrix is None or top_m <= 0:
            return []
        cosines = self.matrix @ np.asarray(query_vec)
        jaccards = keyword_jaccards(set(query_keywords), self.postings, self.sizes)
        scores = cosines.astype(np.float64) + jaccards
        return top_ranked(scores, self.segments, top_m, lambda segment: segment.id)


def rank_pages(
    query_vec: Vector, pages: Sequence[P], top_k: int = DEFAULT_PARAMS.top_k
) -> list[Ranked[P]]:
    """Return the ``top_k`` pages most similar to the query, best first, ties by key."""
    return rank_by_similarity(query_vec, pages, top_k)
