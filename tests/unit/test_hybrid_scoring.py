"""Unit tests of hybrid recall's pure parts: fusion, decay, composite, caps and budget."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from memoryd.services.recall.dates import implied_date
from memoryd.services.recall.hybrid import (
    Candidate,
    Found,
    HitFields,
    Key,
    Limits,
    Priors,
    Tuning,
    assemble,
    cap_per_session,
    collect,
    decay,
    rrf,
)
from memoryd.services.recall.hybrid import score as score_found
from memoryd.shared.adapters.index import Hit, IndexPayload
from memoryd.shared.contracts.recall import PageItem, RetrievedItem, StreamScore, StreamWeights
from memoryd.shared.domain.text import estimate_tokens

NOW = datetime(2026, 3, 1, 12, tzinfo=UTC)
A, B = uuid.UUID(int=1), uuid.UUID(int=2)


def candidate(
    item_id: uuid.UUID,
    ranks: dict[str, int],
    *,
    age: timedelta = timedelta(0),
    importance: float = 0.5,
    evergreen: bool = False,
    session: str | None = "s1",
) -> Candidate:
    fields = {
        "kind": "turn",
        "text": f"item {item_id.int}",
        "user_id": "u",
        "agent_id": "a",
        "session_id": session,
        "turn_id": str(item_id),
        "memory_id": None,
        "category": None,
        "importance": importance,
        "evergreen": evergreen,
        "occurred_at": NOW - age,
    }
    streams = {name: StreamScore(rank=rank, score=1.0 / rank) for name, rank in ranks.items()}
    return Candidate(item_id, fields, streams)


def found_of(cands: dict[uuid.UUID, Candidate]) -> Found:
    """Index each candidate under one key (its own id), ranked as its streams say."""
    keys = {
        item_id: Key(item_id, item_id, c.fields["session_id"], c.fields["occurred_at"], None)
        for item_id, c in cands.items()
    }
    names = {name for c in cands.values() for name in c.streams}
    rankings = {
        name: sorted(
            (i for i, c in cands.items() if name in c.streams),
            key=lambda i, name=name: cands[i].streams[name].rank,  # type: ignore[misc]
        )
        for name in names
    }
    return Found(dict(cands), keys, rankings)


def score(
    cands: dict[uuid.UUID, Candidate],
    weights: StreamWeights,
    k: int,
    tuning: Tuning,
    *,
    now: datetime,
    explain: bool,
) -> list[RetrievedItem]:
    items, _ = score_found(found_of(cands), weights, k, tuning, now=now, explain=explain)
    return items


def order(items: list[RetrievedItem]) -> list[uuid.UUID]:
    return [item.item_id for item in items]


def test_rrf_sums_weight_over_k_plus_rank_across_streams() -> None:
    """An item ranked 1st in BM25 and 2nd in dense scores 1/61 + 2/62 with dense weight 2."""
    fused = rrf({"bm25": [A, B], "dense": [B, A]}, {"bm25": 1.0, "dense": 2.0}, 60)
    assert round(1 / 61 + 2 / 62, 12) == round(fused[A], 12)
    assert fused[B] > fused[A]


def test_a_stream_with_weight_zero_changes_nothing() -> None:
    """Turning the graph stream off leaves the BM25 order as it is."""
    fused = rrf({"bm25": [A, B], "graph": [B]}, {"bm25": 1.0, "graph": 0.0}, 60)
    assert fused[A] > fused[B]


def test_decay_halves_with_time_but_spares_evergreen_items() -> None:
    """exp(-rate * hours) shrinks old items; an evergreen one keeps its full score."""
    assert 0.5 == round(decay(100.0, 0.006931471805599453, evergreen=False), 6)
    assert 1.0 == decay(10_000.0, 0.1, evergreen=True)


def test_decay_puts_the_recent_item_first_unless_the_old_one_is_evergreen() -> None:
    """Two equally relevant items: the newer wins; marked evergreen, the older keeps up."""
    tuning = Tuning(decay_per_hour=0.01, importance_weight=0.0, recency_weight=0.0)
    old = candidate(A, {"bm25": 1}, age=timedelta(days=30))
    new = candidate(B, {"bm25": 2}, age=timedelta(hours=1))
    ranked = score({A: old, B: new}, StreamWeights(), 60, tuning, now=NOW, explain=False)
    assert [B, A] == order(ranked)
    old = candidate(A, {"bm25": 1}, age=timedelta(days=30), evergreen=True)
    ranked = score({A: old, B: new}, StreamWeights(), 60, tuning, now=NOW, explain=False)
    assert [A, B] == order(ranked)


def test_importance_reorders_close_matches_only_when_weighted() -> None:
    """With importance weighted, a slightly worse but important item overtakes; without, not."""
    first = candidate(A, {"bm25": 1}, importance=0.0)
    second = candidate(B, {"bm25": 2}, importance=1.0)
    plain = Tuning(decay_per_hour=0.0, importance_weight=0.0, recency_weight=0.0)
    weighted = Tuning(decay_per_hour=0.0, importance_weight=0.5, recency_weight=0.0)
    both = {A: first, B: second}
    assert [A, B] == order(score(both, StreamWeights(), 60, plain, now=NOW, explain=False))
    assert [B, A] == order(score(both, StreamWeights(), 60, weighted, now=NOW, explain=False))


def test_explain_mode_reports_every_streams_rank_and_the_blend() -> None:
    """Explain lists each stream an item came from with its rank, and the factors used."""
    item = candidate(A, {"bm25": 3, "dense": 1, "graph": 2})
    [ranked] = score({A: item}, StreamWeights(), 60, Tuning(), now=NOW, explain=True)
    assert ranked.explanation is not None
    assert {"bm25": 3, "dense": 1, "graph": 2} == {
        name: stream.rank for name, stream in ranked.explanation.streams.items()
    }
    assert ranked.score == ranked.explanation.composite


def test_at_most_the_cap_of_items_per_session_are_kept() -> None:
    """Four items of one session and one of another: the best three of s1 and the s2 one."""
    ids = [uuid.UUID(int=n) for n in range(1, 5)]
    cands = {item_id: candidate(item_id, {"bm25": item_id.int}) for item_id in ids}
    other = uuid.UUID(int=10)
    cands[other] = candidate(other, {"bm25": 10}, session="s2")
    ranked = score(cands, StreamWeights(), 60, Tuning(), now=NOW, explain=False)
    assert [*ids[:3], other] == order(cap_per_session(ranked, 3))


@given(
    st.integers(min_value=1, max_value=300),
    st.lists(st.text(min_size=1, max_size=120), max_size=15),
)
def test_the_assembled_context_never_exceeds_the_token_budget(
    budget: int, texts: list[str]
) -> None:
    """Whatever the budget and the items, the rendered context fits within it."""
    cands = {
        uuid.UUID(int=n + 1): candidate(uuid.UUID(int=n + 1), {"bm25": n + 1}, session=None)
        for n in range(len(texts))
    }
    items = score(cands, StreamWeights(), 60, Tuning(), now=NOW, explain=False)
    items = [item.model_copy(update={"text": texts[item.item_id.int - 1]}) for item in items]
    context, _, _, kept, used = assemble([], [], items, budget)
    assert used <= budget
    assert estimate_tokens(context) <= budget
    assert [item.item_id for item in items[: len(kept)]] == [item.item_id for item in kept]


def test_a_turn_already_shown_as_a_recent_page_is_not_rendered_twice() -> None:
    """The found turn stays among the items but the context holds its text once."""
    turn_id = uuid.uuid4()
    page = PageItem(
        turn_id=turn_id,
        session_id="s1",
        agent_id="a",
        query="I moved to Berlin.",
        response="Ok",
        occurred_at=NOW,
    )
    found = candidate(A, {"bm25": 1})
    found.fields |= {"text": "I moved to Berlin.\nOk", "turn_id": str(turn_id)}
    items = score({A: found}, StreamWeights(), 60, Tuning(), now=NOW, explain=False)
    context, _, _, kept, _ = assemble([page], [], items, 500)
    assert 1 == context.count("I moved to Berlin.")
    assert [A] == order(kept)


def key(
    point: int, item: uuid.UUID, session: str, *, days_ago: float = 0.0, speaker: str | None = None
) -> Key:
    return Key(uuid.UUID(int=point), item, session, NOW - timedelta(days=days_ago), speaker)


def found_keys(keys: list[Key], ranking: list[int]) -> Found:
    """A BM25 ranking of the given keys (by point number); each key's item is a candidate."""
    cands = {k.item_id: candidate(k.item_id, {"bm25": 1}, session=k.session_id) for k in keys}
    for k in keys:
        cands[k.item_id].fields["occurred_at"] = k.occurred_at
    return Found(
        cands,
        {k.point_id: k for k in keys},
        {"bm25": [uuid.UUID(int=point) for point in ranking]},
    )


PLAIN = Tuning(decay_per_hour=0.0, importance_weight=0.0, recency_weight=0.0)


def test_an_item_scores_its_best_key() -> None:
    """A turn found through its fact key at rank 1 outranks a turn whose only key is 2nd."""
    keys = [key(1, A, "s1"), key(2, B, "s2"), key(3, A, "s1")]
    items, _ = score_found(
        found_keys(keys, [3, 2, 1]), StreamWeights(), 10, PLAIN, now=NOW, explain=False
    )
    assert [A, B] == order(items)


def test_a_session_scores_the_sum_of_its_two_best_keys() -> None:
    """Two good keys in s2 beat the single best key of s1; a third key of s2 adds nothing."""
    c = uuid.UUID(int=3)
    keys = [key(1, A, "s1"), key(2, B, "s2"), key(3, c, "s2"), key(4, c, "s2")]
    found = found_keys(keys, [1, 2, 3, 4])
    two = Tuning(decay_per_hour=0.0, importance_weight=0.0, recency_weight=0.0, session_top_keys=2)
    _, sessions = score_found(found, StreamWeights(), 10, two, now=NOW, explain=False)
    assert ["s2", "s1"] == [s.session_id for s in sessions]
    assert round(1 / 12 + 1 / 13, 6) == sessions[0].score
    one = Tuning(decay_per_hour=0.0, importance_weight=0.0, recency_weight=0.0, session_top_keys=1)
    _, sessions = score_found(found, StreamWeights(), 10, one, now=NOW, explain=False)
    assert ["s1", "s2"] == [s.session_id for s in sessions]


def test_the_date_prior_lifts_the_item_near_the_implied_date() -> None:
    """Asked "two weeks ago", the item from 14 days back overtakes a slightly better match."""
    keys = [key(1, A, "s1", days_ago=60), key(2, B, "s2", days_ago=14)]
    found = found_keys(keys, [1, 2])
    plain, _ = score_found(found, StreamWeights(), 10, PLAIN, now=NOW, explain=False)
    assert [A, B] == order(plain)
    when = implied_date("what did I cook two weeks ago", NOW)
    priors = Priors(query="what did I cook two weeks ago", date=when, date_weight=0.5)
    dated, _ = score_found(found, StreamWeights(), 10, PLAIN, now=NOW, explain=False, priors=priors)
    assert [B, A] == order(dated)


def test_a_turn_whose_speaker_the_query_names_gets_the_bonus() -> None:
    """ "What did Caroline ...": Caroline's turn overtakes Melanie's slightly better one."""
    keys = [key(1, A, "s1", speaker="Melanie"), key(2, B, "s1", speaker="Caroline")]
    found = found_keys(keys, [1, 2])
    priors = Priors(query="What did Caroline paint?", speaker_bonus=0.5)
    items, _ = score_found(found, StreamWeights(), 10, PLAIN, now=NOW, explain=False, priors=priors)
    assert [B, A] == order(items)
    assert all(item.score <= 1.0 for item in items)


def test_a_memory_item_is_shown_only_as_a_listed_memory() -> None:
    """An index hit of a memory that ``memories`` does not list is neither rendered nor kept."""
    stale = candidate(A, {"bm25": 1})
    stale.fields |= {"kind": "memory", "text": "diet: eats no meat", "memory_id": str(A)}
    items = score({A: stale}, StreamWeights(), 60, Tuning(), now=NOW, explain=False)
    context, _, memories, kept, _ = assemble([], [], items, 500)
    assert ("", [], []) == (context, memories, kept)


@given(
    st.lists(st.sampled_from(["s1", "s2", "s3", None]), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=12),
    st.integers(min_value=1, max_value=4),
    st.floats(min_value=0.0, max_value=0.6),
)
def test_limits_keep_exactly_what_capping_the_whole_ranking_keeps(
    sessions: list[str | None], limit: int, per_session: int, min_score: float
) -> None:
    """Items are built only for what the limits keep: the same items, in the same order."""
    cands = {
        uuid.UUID(int=n + 1): candidate(
            uuid.UUID(int=n + 1), {"bm25": n + 1}, session=session, age=timedelta(hours=n % 5)
        )
        for n, session in enumerate(sessions)
    }
    tuning = Tuning()
    everything = score(cands, StreamWeights(), 60, tuning, now=NOW, explain=False)
    expected = cap_per_session([i for i in everything if i.score >= min_score], per_session)
    limits = Limits(limit=limit, min_score=min_score, max_per_session=per_session)

    kept, _ = score_found(
        found_of(cands), StreamWeights(), 60, tuning, now=NOW, explain=False, limits=limits
    )

    assert expected[:limit] == kept


def _hit(point: uuid.UUID, text: str, of: uuid.UUID | None = None) -> Hit:
    extra = {"of": str(of)} if of else {}
    payload = IndexPayload(tenant="t", user_id="u", kind="turn", occurred_at=0.0, extra=extra)
    return Hit(id=point, score=0.5, payload=payload, text=text)


def test_what_a_point_shows_is_derived_again_when_a_write_replaced_its_payload() -> None:
    """The same stored payload is derived once; a rewritten point shows its new text."""
    derived = HitFields()
    before = _hit(A, "the old text", of=B)
    first = collect({"bm25": [before]}, derived)
    again = collect({"dense": [Hit(A, 0.9, before.payload, before.text)]}, derived)
    rewritten = collect({"bm25": [_hit(A, "the new text", of=B)]}, derived)

    assert first.candidates[B].fields is again.candidates[B].fields
    assert "the old text" == first.candidates[B].fields["text"]
    assert "the new text" == rewritten.candidates[B].fields["text"]
    assert {A: B} == {point: key.item_id for point, key in rewritten.keys.items()}
