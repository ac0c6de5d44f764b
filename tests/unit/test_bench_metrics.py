"""Tests for the LongMemEval retrieval metrics."""

# Asserts put the expected value first (STYLE.md), which SIM300 reads as a Yoda condition.

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.services.bench.datasets import Question
from memoryd.services.bench.metrics import (
    aggregate,
    collapse_to_sessions,
    dcg,
    evaluate,
    ndcg_any,
    recall_all,
    recall_any,
    score_question,
    score_ranking,
)

SESSION_OF = {"a:0": "a", "a:1": "a", "b:0": "b", "c:0": "c", "d:0": "d", "e:0": "e", "f:0": "f"}


def _question(
    question_id: str = "q",
    group: str = "multi-session",
    sessions: tuple[str, ...] = ("b", "d"),
    turns: tuple[str, ...] = ("b:0",),
    abstention: bool = False,
) -> Question:
    return Question(
        id=question_id,
        conversation_id="conv",
        text="?",
        answer="!",
        date=datetime(2023, 1, 1, tzinfo=UTC),
        type_or_category=group,
        answer_session_ids=sessions,
        answer_turn_ids=turns,
        abstention=abstention,
    )


def test_recall_any_needs_one_relevant_in_top_k() -> None:
    """recall_any@k is 1 as soon as one relevant id is within the cut-off."""
    assert 1.0 == recall_any(["x", "b", "y"], {"b", "d"}, k=2)
    assert 0.0 == recall_any(["x", "y", "b"], {"b", "d"}, k=2)


def test_recall_all_needs_every_relevant_in_top_k() -> None:
    """recall_all@k is 1 only when every relevant id is within the cut-off."""
    assert 0.0 == recall_all(["b", "x", "d"], {"b", "d"}, k=2)
    assert 1.0 == recall_all(["b", "x", "d"], {"b", "d"}, k=3)


def test_dcg_leaves_first_two_ranks_undiscounted() -> None:
    """LongMemEval's DCG gives ranks 1 and 2 full gain and rank 3 gain over log2(3)."""
    assert pytest.approx(2.0 + 1.0 / math.log2(3)) == dcg([1.0, 1.0, 1.0])


def test_ndcg_hand_computed() -> None:
    """Relevant ids at ranks 2 and 4 score (1 + 1/2) / (1 + 1) = 0.75."""
    assert pytest.approx(0.75) == ndcg_any(["x", "b", "y", "d"], {"b", "d"}, k=5)


def test_ndcg_ideal_is_capped_at_k() -> None:
    """With one slot and the top item relevant, NDCG@1 is perfect even if more are relevant."""
    assert 1.0 == ndcg_any(["b", "d"], {"b", "d"}, k=1)


def test_ndcg_of_nothing_relevant_is_zero() -> None:
    """An empty relevant set scores 0.0, not a division by zero."""
    assert 0.0 == ndcg_any(["b"], set(), k=5)


def test_sessions_collapse_to_first_turn_rank() -> None:
    """A session counts at the rank of its first retrieved turn; later turns are dropped."""
    assert ["a", "b", "c"] == collapse_to_sessions(["a:1", "b:0", "a:0", "c:0"], SESSION_OF)


def test_duplicate_ids_count_once() -> None:
    """A ranking that repeats an id cannot fill the top k with it."""
    scores = score_ranking(["x", "x", "x", "b"], {"b"}, "session", ks=(2,))
    assert 1.0 == scores["session.recall_any@2"]


def test_score_question_session_level_uses_distinct_sessions() -> None:
    """Turns of one session do not crowd others out of the session top k."""
    ranked = ["a:0", "a:1", "b:0", "c:0", "d:0"]
    scores = score_question(_question(), ranked, SESSION_OF, ks=(3,)).scores
    assert 0.0 == scores["session.recall_all@3"]
    assert (
        1.0
        == score_question(_question(), ranked, SESSION_OF, ks=(4,)).scores["session.recall_all@4"]
    )


def test_score_question_turn_level() -> None:
    """Turn level scores the turns marked as holding the answer."""
    scores = score_question(_question(), ["a:0", "a:1", "b:0"], SESSION_OF, ks=(2, 3)).scores
    assert (0.0, 1.0) == (scores["turn.recall_any@2"], scores["turn.recall_any@3"])


def test_score_question_skips_level_without_evidence() -> None:
    """A question with no answer turns gets session metrics only."""
    scores = score_question(_question(turns=()), ["b:0"], SESSION_OF, ks=(5,)).scores
    assert {"session.recall_any@5", "session.recall_all@5", "session.ndcg_any@5"} == set(scores)


def test_explicit_session_ranking_overrides_collapse() -> None:
    """A system that ranks sessions itself is scored on that ranking."""
    scores = score_question(
        _question(), ["a:0"], SESSION_OF, ks=(2,), ranked_session_ids=["d", "b"]
    ).scores
    assert 1.0 == scores["session.recall_all@2"]


def test_aggregate_averages_overall_and_per_group() -> None:
    """Means and counts are computed overall and for each question type."""
    hit = score_question(_question("q1", "temporal"), ["b:0", "d:0"], SESSION_OF, ks=(2,))
    miss = score_question(_question("q2", "single"), ["a:0", "c:0"], SESSION_OF, ks=(2,))
    result = aggregate([hit, miss])
    assert 0.5 == result.overall.means["session.recall_all@2"]
    assert 2 == result.overall.counts["session.recall_all@2"]
    assert 1.0 == result.by_group["temporal"].means["session.recall_all@2"]


def test_evaluate_leaves_out_abstention() -> None:
    """Abstention questions are counted as excluded and do not move the averages."""
    questions = [_question("q1"), _question("q2", abstention=True)]
    rankings = {"q1": ["b:0", "d:0"], "q2": ["a:0"]}
    result = evaluate(questions, rankings, {"conv": SESSION_OF}, ks=(2,))
    assert (1.0, 1) == (result.overall.means["session.recall_all@2"], result.excluded)


def test_evaluate_ranks_sessions_as_the_system_did_when_told() -> None:
    """Given the system's own session ranking, session metrics use it; turn metrics do not."""
    questions = [_question("q1")]
    rankings = {"q1": ["a:0", "b:0", "d:0"]}
    first_turn = evaluate(questions, rankings, {"conv": SESSION_OF}, ks=(1,))
    own = evaluate(questions, rankings, {"conv": SESSION_OF}, ks=(1,), sessions={"q1": ["b"]})
    assert 0.0 == first_turn.overall.means["session.recall_any@1"]
    assert 1.0 == own.overall.means["session.recall_any@1"]
    assert first_turn.overall.means["turn.recall_any@1"] == own.overall.means["turn.recall_any@1"]


def _official_turn2session(
    ranked_turns: list[str], relevant: set[str], k: int
) -> tuple[float, float]:
    """Reimplement LongMemEval's evaluate_retrieval_turn2session recall as an oracle."""
    sessions = [SESSION_OF[turn] for turn in ranked_turns]
    effective_k = k
    while effective_k <= len(sessions) and len(set(sessions[:effective_k])) < k:
        effective_k += 1
    recalled = set(sessions[:effective_k])
    return float(any(s in recalled for s in relevant)), float(all(s in recalled for s in relevant))


@given(
    ranked=st.permutations(sorted(SESSION_OF)),
    relevant=st.sets(st.sampled_from(sorted(set(SESSION_OF.values()))), min_size=1),
    k=st.integers(min_value=1, max_value=7),
)
def test_session_recall_matches_official_widened_k(
    ranked: list[str], relevant: set[str], k: int
) -> None:
    """Collapsing turns to sessions gives the official widened-k session recall."""
    scores = score_ranking(collapse_to_sessions(ranked, SESSION_OF), relevant, "session", (k,))
    expected = _official_turn2session(ranked, relevant, k)
    assert expected == (scores[f"session.recall_any@{k}"], scores[f"session.recall_all@{k}"])
