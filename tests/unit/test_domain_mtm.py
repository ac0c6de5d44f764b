"""Unit tests for mid-term memory: segments, Fscore, heat, promotion, eviction and ranking."""

# STYLE.md puts the expected value first in asserts, which SIM300 calls a Yoda condition.

from __future__ import annotations

import gc
import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.shared.domain.memoryos import DEFAULT_PARAMS, MemoryOsParams, unit_vector
from memoryd.shared.domain.mtm import (
    FilingTable,
    PageRef,
    Segment,
    SegmentIndex,
    after_promotion,
    choose_segment,
    coldest,
    file_page,
    fscore,
    heat,
    jaccard,
    open_segment,
    promotion_heat,
    rank_pages,
    rank_segments,
    recency,
    rewrite_summary,
    segments_to_evict,
    should_promote,
    visit,
)

T0 = datetime(2025, 1, 1, tzinfo=UTC)
X = unit_vector([1.0, 0.0, 0.0])
Y = unit_vector([0.0, 1.0, 0.0])
Z = unit_vector([0.0, 0.0, 1.0])


def segment(
    segment_id: str,
    vector: object = X,
    keywords: tuple[str, ...] = (),
    *,
    n_visit: int = 0,
    l_interaction: int = 0,
    last_visit_at: datetime = T0,
    created_at: datetime = T0,
) -> Segment:
    """Build a segment in a given state, as if loaded from the read model."""
    return Segment(
        id=segment_id,
        vector=vector,
        mean_norm=1.0,
        keywords=keywords,
        page_count=max(1, l_interaction),
        n_visit=n_visit,
        l_interaction=l_interaction,
        last_visit_at=last_visit_at,
        created_at=created_at,
    )


def test_jaccard_of_overlapping_sets() -> None:
    """Two shared keywords out of four distinct ones give 0.5."""
    assert 0.5 == jaccard({"a", "b", "c"}, {"b", "c", "d"})


def test_jaccard_of_empty_sets_is_zero() -> None:
    """Two empty keyword sets have Jaccard 0, not a division error."""
    assert 0.0 == jaccard(set(), [])


def test_fscore_adds_cosine_and_jaccard() -> None:
    """Cosine 0.6 plus Jaccard 0.5 is 1.1."""
    page = unit_vector([0.6, 0.8, 0.0])
    assert 1.1 == pytest.approx(fscore(X, ["a", "b", "c"], page, ["b", "c", "d"]), abs=1e-6)


def test_fscore_without_keywords_is_the_cosine() -> None:
    """With no keywords on either side the Fscore is the cosine alone."""
    page = unit_vector([0.6, 0.8, 0.0])
    assert 0.6 == pytest.approx(fscore(X, [], page, []), abs=1e-6)


def test_page_on_the_same_topic_joins_its_segment() -> None:
    """A cooking page joins the cooking segment (0.8 + 1/2), not the travel one (0.6)."""
    cooking = segment("cooking", X, ("recipe", "pasta"))
    travel = segment("travel", Y, ("flight",))
    choice = choose_segment(unit_vector([0.8, 0.6, 0.0]), {"pasta"}, [travel, cooking], 0.6)
    assert "cooking" == choice.segment_id
    assert 1.3 == pytest.approx(choice.score, abs=1e-6)


def test_unrelated_page_opens_a_new_segment() -> None:
    """A page orthogonal to every segment and sharing no keyword opens a new segment."""
    choice = choose_segment(Z, {"tax"}, [segment("cooking", X, ("pasta",))], 0.6)
    assert choice.is_new
    assert 0.0 == choice.score


def test_score_equal_to_theta_joins() -> None:
    """An Fscore of exactly theta (cosine 0, Jaccard 3/5) is enough to join."""
    existing = segment("s", X, ("a", "b", "c", "d"))
    choice = choose_segment(Y, {"a", "b", "c", "e"}, [existing], 0.6)
    assert "s" == choice.segment_id


def test_first_page_opens_a_new_segment() -> None:
    """With no segment yet the page opens one, and there is no score."""
    choice = choose_segment(X, {"a"}, [], 0.6)
    assert (None, None) == (choice.segment_id, choice.score)


def test_equal_scores_pick_the_smallest_id() -> None:
    """Two equally good segments: the smaller id wins, whatever the input order."""
    twins = [segment("b", X, ("k",)), segment("a", X, ("k",))]
    assert "a" == choose_segment(X, {"k"}, twins, 0.6).segment_id
    assert "a" == choose_segment(X, {"k"}, twins[::-1], 0.6).segment_id


def test_open_segment_holds_one_page() -> None:
    """A new segment has the page's vector and keywords, one page and one interaction."""
    opened = open_segment("s", X, {"b", "a"}, T0)
    assert [1.0, 0.0, 0.0] == opened.vector.tolist()
    assert ("a", "b") == opened.keywords
    assert (1, 1, 0) == (opened.page_count, opened.l_interaction, opened.n_visit)
    assert (T0, T0) == (opened.created_at, opened.last_visit_at)


def test_segment_vector_is_the_renormalised_mean_of_its_pages() -> None:
    """After pages X, Y, X the vector is the unit mean (2, 1, 0)/sqrt(5)."""
    filed = file_page(file_page(open_segment("s", X, [], T0), Y, [], T0), X, [], T0)
    expected = [2 / math.sqrt(5), 1 / math.sqrt(5), 0.0]
    assert expected == pytest.approx(filed.vector.tolist(), abs=1e-6)
    assert math.sqrt(5) / 3 == pytest.approx(filed.mean_norm)


def test_file_page_counts_the_interaction_and_refreshes_recency() -> None:
    """Filing adds a page and an interaction and counts as an access."""
    later = T0 + timedelta(days=3)
    filed = file_page(open_segment("s", X, [], T0), Y, [], later)
    assert (2, 2, later) == (filed.page_count, filed.l_interaction, filed.last_visit_at)


def test_file_page_puts_the_new_keywords_first() -> None:
    """A page's keywords (sorted) come first, then the segment's, each once."""
    existing = segment("s", X, ("x", "y"))
    assert ("x", "z", "y") == file_page(existing, X, {"z", "x"}, T0).keywords


def test_file_page_bounds_the_keywords() -> None:
    """Past the capacity the keywords not seen recently drop off."""
    params = MemoryOsParams(segment_keyword_capacity=3)
    existing = segment("s", X, ("x", "z", "y"))
    assert ("a", "b", "x") == file_page(existing, X, ["b", "a"], T0, params).keywords


@settings(max_examples=50, deadline=None)
@given(
    old=st.lists(st.text(min_size=1, max_size=4), unique=True, max_size=30),
    new=st.sets(st.text(min_size=1, max_size=4), max_size=30),
    capacity=st.integers(min_value=1, max_value=25),
)
def test_keywords_stay_bounded_and_keep_the_page(
    old: list[str], new: set[str], capacity: int
) -> None:
    """Keywords never exceed the capacity, never repeat, and keep the page's when they fit."""
    params = MemoryOsParams(segment_keyword_capacity=capacity)
    keywords = file_page(segment("s", X, tuple(old)), X, new, T0, params).keywords
    assert len(keywords) <= capacity
    assert len(set(keywords)) == len(keywords)
    if len(new) <= capacity:
        assert new <= set(keywords)


def test_file_page_refuses_a_vector_of_another_size() -> None:
    """A page vector of the wrong dimension is refused with a clear error."""
    with pytest.raises(ValueError, match="shape"):
        file_page(open_segment("s", X, [], T0), unit_vector([1.0, 0.0]), [], T0)


def test_rewrite_summary_replaces_summary_and_keywords() -> None:
    """A rewritten summary replaces the old one; keywords are deduplicated in order."""
    old = segment("s", X, ("old",))
    rewritten = rewrite_summary(old, "Pasta recipes", ["pasta", "sauce", "pasta"])
    assert ("Pasta recipes", ("pasta", "sauce")) == (rewritten.summary, rewritten.keywords)
    assert [1.0, 0.0, 0.0] == rewritten.vector.tolist()


def test_visit_counts_and_refreshes_recency() -> None:
    """A visit adds one to N_visit and moves the last visit to now."""
    later = T0 + timedelta(hours=5)
    visited = visit(segment("s", n_visit=2), later)
    assert (3, later) == (visited.n_visit, visited.last_visit_at)


def test_heat_formula() -> None:
    """Two visits, three pages and one time constant elapsed give 2 + 3 + 1/e."""
    hot = segment("s", n_visit=2, l_interaction=3)
    now = T0 + timedelta(seconds=DEFAULT_PARAMS.mu)
    assert 5 + math.exp(-1) == pytest.approx(heat(hot, now, DEFAULT_PARAMS))


def test_heat_uses_the_weights() -> None:
    """Weights scale each term: 2*2 visits + 0.5*4 pages + 3*recency 1."""
    params = MemoryOsParams(alpha=2.0, beta=0.5, gamma=3.0)
    assert 9.0 == pytest.approx(heat(segment("s", n_visit=2, l_interaction=4), T0, params))


def test_recency_ignores_a_visit_in_the_future() -> None:
    """A last visit after now (clock skew) counts as now, never above 1."""
    ahead = segment("s", last_visit_at=T0 + timedelta(minutes=1))
    assert 1.0 == recency(ahead, T0)


def test_heat_rises_with_visits_and_pages() -> None:
    """Each visit adds alpha and each filed page adds beta to the heat."""
    base = open_segment("s", X, [], T0)
    assert heat(base, T0) + 1.0 == pytest.approx(heat(visit(base, T0), T0))
    assert heat(base, T0) + 1.0 == pytest.approx(heat(file_page(base, X, [], T0), T0))


def test_heat_cools_with_time() -> None:
    """The same segment is colder a month later than now."""
    base = open_segment("s", X, [], T0)
    assert heat(base, T0 + timedelta(days=30)) < heat(base, T0)


def promotions(start: Segment, pages: int, now: datetime) -> tuple[Segment, list[int]]:
    """File ``pages`` pages as the MTM worker does; return the segment and the promoting pages."""
    promoted: list[int] = []
    current = start
    for number in range(1, pages + 1):
        current = file_page(current, X, [], now)
        if should_promote(current, now, DEFAULT_PARAMS):
            promoted.append(number)
            current = after_promotion(current)
    return current, promoted


def test_a_burst_of_pages_promotes_exactly_once() -> None:
    """Seven pages of a new segment promote once, at the fifth (5 + recency 1 > tau 5)."""
    _, promoted = promotions(open_segment("s", X, [], T0), 6, T0)
    assert [4] == promoted


def test_promotion_again_only_after_new_activity_passes_tau() -> None:
    """After a promotion, four more pages stay below tau and the fifth promotes again."""
    once, first = promotions(open_segment("s", X, [], T0), 4, T0)
    _, second = promotions(once, 5, T0)
    assert ([4], [5]) == (first, second)


def test_a_much_visited_segment_is_not_promoted_on_every_page() -> None:
    """Ten visits promote on the next page, then only after five more pages."""
    visited = segment("s", n_visit=10, l_interaction=0)
    _, promoted = promotions(visited, 12, T0)
    assert [1, 6, 11] == promoted


def test_visits_alone_never_promote_a_segment_with_no_new_page() -> None:
    """Visits past tau with no page since the last promotion promote nothing; the next page
    then promotes at once, the visits still counted."""
    spent = after_promotion(segment("s", n_visit=3, l_interaction=6))
    visited = spent
    for _ in range(20):
        visited = visit(visited, T0)
    filed = file_page(visited, X, [], T0)

    assert promotion_heat(visited, T0, DEFAULT_PARAMS) > DEFAULT_PARAMS.tau
    assert not should_promote(visited, T0, DEFAULT_PARAMS)
    assert should_promote(filed, T0, DEFAULT_PARAMS)


def test_after_promotion_resets_the_interactions() -> None:
    """Promotion resets L_interaction, counts the promotion and keeps the visits."""
    promoted = after_promotion(segment("s", n_visit=3, l_interaction=6))
    assert (0, 1, 3) == (promoted.l_interaction, promoted.promoted_count, promoted.n_visit)


def test_coldest_is_the_least_heat() -> None:
    """The segment with the least heat is the one to evict."""
    segments = [
        segment("hot", n_visit=5),
        segment("cold", last_visit_at=T0 - timedelta(days=300)),
        segment("warm", l_interaction=2),
    ]
    assert "cold" == coldest(segments, T0).id


def test_coldest_tie_goes_to_the_oldest_then_smallest_id() -> None:
    """Equal heat: the earliest created segment goes first, then the smallest id."""
    old = segment("z", created_at=T0 - timedelta(days=1))
    assert "z" == coldest([segment("a"), old], T0).id
    assert "a" == coldest([segment("b"), segment("a")], T0).id


_weight = st.floats(min_value=-5.0, max_value=5.0, allow_nan=False)
_age = st.integers(min_value=-3_600, max_value=400 * 86_400_000_000)  # microseconds, some ahead


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), _age, _age), max_size=30),
    st.tuples(_weight, _weight, _weight, st.floats(min_value=1.0, max_value=1e9)),
    st.integers(min_value=1, max_value=25),
)
def test_eviction_orders_segments_by_heat_then_age_then_id(
    states: list[tuple[int, int, int, int]],
    weights: tuple[float, float, float, float],
    capacity: int,
) -> None:
    """The segments evicted, and the coldest, are those the definition names: the least heat,
    then the earliest created (its timestamp), then the smallest id."""
    alpha, beta, gamma, mu = weights
    params = MemoryOsParams(alpha=alpha, beta=beta, gamma=gamma, mu=mu, max_segments=capacity)
    segments = [
        segment(
            f"s{n % 7}-{n}",
            n_visit=visits,
            l_interaction=pages,
            last_visit_at=T0 - timedelta(microseconds=visited),
            created_at=T0 - timedelta(microseconds=created),
        )
        for n, (visits, pages, visited, created) in enumerate(states)
    ]

    def defined(s: Segment) -> tuple[float, float, str]:
        return (heat(s, T0, params), s.created_at.timestamp(), s.id)

    expected = sorted(segments, key=defined)[: max(0, len(segments) - capacity)]
    assert [s.id for s in expected] == [s.id for s in segments_to_evict(segments, T0, params)]
    if segments:
        assert min(segments, key=defined).id == coldest(segments, T0, params).id


def test_coldest_of_nothing_is_an_error() -> None:
    """Asking for the coldest of no segments is an error, not a silent None."""
    with pytest.raises(ValueError, match="no segment"):
        coldest([], T0)


def test_segments_to_evict_are_the_coldest_beyond_capacity() -> None:
    """Over capacity by two, the two coldest are evicted, coldest first."""
    params = MemoryOsParams(max_segments=2)
    segments = [
        segment(name, n_visit=visits) for name, visits in zip("abcd", [3, 0, 2, 1], strict=True)
    ]
    assert ["b", "d"] == [s.id for s in segments_to_evict(segments, T0, params)]
    assert [] == segments_to_evict(segments[:2], T0, params)


def test_rank_segments_by_fscore() -> None:
    """Segments rank by cosine plus keyword overlap with the query, best top_m first."""
    segments = [
        segment("travel", Y, ("flight",)),
        segment("cooking", X, ("pasta",)),
        segment("baking", unit_vector([0.8, 0.6, 0.0]), ("bread",)),
    ]
    ranked = rank_segments(X, {"pasta"}, segments, top_m=2)
    assert ["cooking", "baking"] == [entry.item.id for entry in ranked]
    assert [2.0, 0.8] == pytest.approx([entry.score for entry in ranked], abs=1e-6)


def test_rank_pages_by_similarity() -> None:
    """Pages rank by cosine with the query, at most top_k of them."""
    pages = [
        PageRef(page_id="p1", segment_id="s", vector=Y),
        PageRef(page_id="p2", segment_id="s", vector=unit_vector([0.6, 0.8, 0.0])),
        PageRef(page_id="p3", segment_id="s", vector=X),
    ]
    assert ["p3", "p2"] == [entry.item.page_id for entry in rank_pages(X, pages, top_k=2)]


def test_segment_round_trips_through_json() -> None:
    """A segment loads back from its canonical JSON with the same state and vector."""
    original = visit(file_page(open_segment("s", X, {"a"}, T0), Y, {"b"}, T0), T0)
    loaded = Segment.from_json(original.to_json())
    assert original == loaded
    assert np.array_equal(original.vector, loaded.vector)
    assert heat(original, T0) == heat(loaded, T0)


DIRECTIONS = [X, Y, Z, unit_vector([0.8, 0.6, 0.0]), unit_vector([0.0, 0.6, 0.8])]
WORDS = ["pasta", "bread", "flight", "train", "jazz"]
# Up to 25 segments, each a direction and up to four keywords.
SEGMENT_SHAPES = st.lists(
    st.tuples(
        st.sampled_from(range(len(DIRECTIONS))), st.lists(st.sampled_from(WORDS), max_size=4)
    ),
    max_size=25,
)


@given(
    SEGMENT_SHAPES,
    st.sampled_from(range(len(DIRECTIONS))),
    st.lists(st.sampled_from(WORDS), max_size=3),
    st.integers(min_value=0, max_value=8),
)
def test_the_segment_index_ranks_as_sorting_every_fscore_does(
    shapes: list[tuple[int, list[str]]], query: int, words: list[str], top_m: int
) -> None:
    """Same segments, same scores to the bit, same order (ties by id), whatever the ties."""
    segments = [
        segment(f"s{n:02d}", DIRECTIONS[d], tuple(keywords))
        for n, (d, keywords) in enumerate(shapes)
    ]
    query_vec = DIRECTIONS[query]
    # Sorting every segment's Fscore, the cosines one matrix product (as ranking did before
    # the index: a product of a stack rounds differently from one dot product at a time).
    cosines = np.stack([s.vector for s in segments]) @ query_vec if segments else []
    everyone = [
        (float(cosine) + jaccard(s.keywords, words), s.id)
        for s, cosine in zip(segments, cosines, strict=True)
    ]
    expected = sorted(everyone, key=lambda pair: (-pair[0], pair[1]))[:top_m]

    ranked = rank_segments(query_vec, words, segments, top_m)

    assert expected == [(entry.score, entry.item.id) for entry in ranked]


@given(
    SEGMENT_SHAPES,
    st.sampled_from(range(len(DIRECTIONS))),
    st.lists(st.sampled_from(WORDS), max_size=3),
)
def test_a_page_joins_the_segment_with_the_best_fscore_as_scoring_each_would_choose(
    shapes: list[tuple[int, list[str]]], page: int, words: list[str]
) -> None:
    """The best segment by cosine + Jaccard (ties by id), or a new one below theta; the
    score is the stacked vectors' cosine plus the keyword sets' Jaccard to the bit."""
    segments = [
        segment(f"s{n:02d}", DIRECTIONS[d], tuple(keywords))
        for n, (d, keywords) in enumerate(shapes)
    ]
    page_vec = DIRECTIONS[page]
    cosines = np.stack([s.vector for s in segments]) @ page_vec if segments else []
    scores = [
        (float(cosine) + jaccard(s.keywords, words), s.id)
        for s, cosine in zip(segments, cosines, strict=True)
    ]
    best = min(scores, key=lambda pair: (-pair[0], pair[1]), default=None)

    choice = choose_segment(page_vec, words, segments, 0.6)

    if best is None:
        assert (None, None) == (choice.segment_id, choice.score)
    else:
        by_definition = max(fscore(s.vector, s.keywords, page_vec, words) for s in segments)
        assert by_definition == pytest.approx(choice.score, abs=1e-6)
        assert (best[0], best[1] if best[0] >= 0.6 else None) == (
            choice.score,
            choice.segment_id,
        )


# A change to a user's segments: put segment n (opened or replaced) in a direction with
# keywords, or remove segment n (when held).
CHANGES = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=9),
        st.none()
        | st.tuples(
            st.sampled_from(range(len(DIRECTIONS))), st.lists(st.sampled_from(WORDS), max_size=4)
        ),
    ),
    max_size=40,
)


@given(
    CHANGES, st.sampled_from(range(len(DIRECTIONS))), st.lists(st.sampled_from(WORDS), max_size=3)
)
def test_a_filing_table_kept_through_changes_chooses_as_a_fresh_one(
    changes: list[tuple[int, tuple[int, list[str]] | None]], page: int, words: list[str]
) -> None:
    """Synced after each change (segments opened, refiled, evicted), a kept table makes the
    choice a table built from the final segments makes, and holds exactly those segments."""
    kept = FilingTable()
    held: dict[str, Segment] = {}
    for n, shape in changes:
        if shape is None:
            held.pop(f"s{n}", None)
        else:
            held[f"s{n}"] = segment(f"s{n}", DIRECTIONS[shape[0]], tuple(shape[1]))
        kept.sync(held)
        assert len(held) == len(kept)

    page_vec = DIRECTIONS[page]
    assert choose_segment(page_vec, words, held.values(), 0.6) == kept.choose(page_vec, words, 0.6)
    for word in WORDS:  # each keyword alone: a stale posting shows as a wrong Jaccard
        fresh = choose_segment(page_vec, [word], held.values(), 0.6)
        assert fresh == kept.choose(page_vec, [word], 0.6)


# A reload of a user's segments: segment n visited (heat), given new keywords, moved to
# another direction, or removed (when held).
RELOADS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=9),
        st.sampled_from(["visit", "keywords", "vector", "remove"]),
        st.sampled_from(range(len(DIRECTIONS))),
        st.lists(st.sampled_from(WORDS), max_size=4),
    ),
    max_size=20,
)


@given(
    SEGMENT_SHAPES,
    RELOADS,
    st.sampled_from(range(len(DIRECTIONS))),
    st.lists(st.sampled_from(WORDS), max_size=3),
)
def test_an_index_built_from_the_one_before_ranks_as_a_fresh_one(
    shapes: list[tuple[int, list[str]]],
    reloads: list[tuple[int, str, int, list[str]]],
    query: int,
    words: list[str],
) -> None:
    """Each reload's index, made from the index before, ranks (scores, order, heat) as an
    index built from the reloaded segments alone."""
    held = {
        f"s{n}": segment(f"s{n}", DIRECTIONS[d], tuple(keywords))
        for n, (d, keywords) in enumerate(shapes[:10])
    }
    index = SegmentIndex.of(held.values())
    for n, change, direction, keywords in reloads:
        old = held.get(f"s{n}")
        if old is None:
            continue
        if change == "remove":
            del held[old.id]
        elif change == "visit":
            held[old.id] = visit(old, T0 + timedelta(hours=n))
        elif change == "keywords":
            held[old.id] = old.model_copy(update={"keywords": tuple(keywords)})
        else:
            held[old.id] = old.model_copy(update={"vector": DIRECTIONS[direction]})
        index = SegmentIndex.of(held.values(), index)

        fresh = SegmentIndex.of(held.values()).rank(DIRECTIONS[query], words, 10)
        kept = index.rank(DIRECTIONS[query], words, 10)
        assert [(e.score, e.item) for e in fresh] == [(e.score, e.item) for e in kept]


def test_an_index_of_visited_segments_reuses_the_arrays_and_holds_the_new_heat() -> None:
    segments = [segment("a", X, ("pasta",)), segment("b", Y, ("jazz",))]
    before = SegmentIndex.of(segments)

    after = SegmentIndex.of([visit(segments[0], T0 + timedelta(hours=1)), segments[1]], before)

    assert after.matrix is before.matrix
    assert after.postings is before.postings
    assert 1 == after.rank(X, {"pasta"}, 1)[0].item.n_visit


@pytest.mark.parametrize(
    "changed",
    [
        [segment("a", Z, ("pasta",)), segment("b", Y, ("jazz",))],  # a vector
        [segment("a", X, ("bread",)), segment("b", Y, ("jazz",))],  # keywords
        [segment("b", Y, ("jazz",)), segment("a", X, ("pasta",))],  # the order
        [segment("a", X, ("pasta",))],  # one removed
    ],
)
def test_an_index_of_changed_segments_is_built_anew(changed: list[Segment]) -> None:
    before = SegmentIndex.of([segment("a", X, ("pasta",)), segment("b", Y, ("jazz",))])

    after = SegmentIndex.of(changed, before)

    assert after.matrix is not before.matrix
    assert SegmentIndex.of(changed).rank(X, {"pasta"}, 2) == after.rank(X, {"pasta"}, 2)


def test_a_filing_table_refuses_a_vector_of_another_width() -> None:
    """A segment whose vector has another width is an error, not a silent mis-score."""
    table = FilingTable()
    table.sync({"a": segment("a", X)})
    with pytest.raises(ValueError, match="dimensions"):
        table.sync({"a": segment("a", X), "b": segment("b", unit_vector([1.0, 0.0]))})


def _tracked_within(root: object) -> int:
    """Count the objects the cyclic collector tracks that ``root`` reaches (root included)."""
    seen, stack, count = {id(root)}, [root], 0
    while stack:
        current = stack.pop()
        count += gc.is_tracked(current)
        for referent in gc.get_referents(current):
            if id(referent) not in seen and not isinstance(referent, Segment | type):
                seen.add(id(referent))
                stack.append(referent)
    return count


def test_a_filing_table_leaves_its_keywords_to_refcounting() -> None:
    # A worker keeps a table per user, and every full collection walks what it tracks: 200
    # segments of 10 keywords, ~1,000 distinct, were ~1,200 tracked sets and frozensets.
    table = FilingTable()
    vectors = np.random.default_rng(7).standard_normal((200, 3)).astype(np.float32)
    table.sync(
        {
            f"s{n}": segment(
                f"s{n}", unit_vector(vectors[n]), tuple(f"w{(5 * n + k) % 997}" for k in range(10))
            )
            for n in range(200)
        }
    )
    gc.collect()  # tuples of atomic values leave the collector's lists at the next pass
    assert _tracked_within(table) < 20
