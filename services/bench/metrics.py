"""Retrieval metrics with LongMemEval's official definitions.

Definitions follow LongMemEval's `src/retrieval/eval_utils.py`:

- `recall_any@k`: 1 if some relevant id is in the top k, else 0.
- `recall_all@k`: 1 if every relevant id is in the top k, else 0.
- `ndcg_any@k`: NDCG with binary relevance and LongMemEval's DCG, which leaves ranks 1 and 2
  undiscounted and divides rank r >= 2 by log2(r); the ideal ranking puts every relevant id
  first.

Session level scores a ranking of turns by the sessions they came from: each session counts at
the rank of its first turn and its later turns are dropped, so the top k holds k distinct
sessions (the official code widens k until it does, which gives the same recall). Turn level
scores the turns themselves against the turns marked as holding the answer. Abstention
questions (LongMemEval `_abs`, LoCoMo category 5) are left out, as in the official averages.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from statistics import fmean
from typing import Literal

from pydantic import BaseModel, ConfigDict

from memoryd.services.bench.datasets import Question

__all__ = [
    "DEFAULT_KS",
    "METRIC_NAMES",
    "OVERALL",
    "Evaluation",
    "GroupSummary",
    "Level",
    "MetricName",
    "QuestionScores",
    "aggregate",
    "collapse_to_sessions",
    "dcg",
    "evaluate",
    "metric_key",
    "ndcg_any",
    "recall_all",
    "recall_any",
    "score_question",
    "score_ranking",
]

Level = Literal["session", "turn"]
MetricName = Literal["recall_any", "recall_all", "ndcg_any"]
METRIC_NAMES: tuple[MetricName, ...] = ("recall_any", "recall_all", "ndcg_any")
DEFAULT_KS: tuple[int, ...] = (5, 10)
OVERALL = "overall"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class QuestionScores(_Frozen):
    """One question's metric values, keyed like "session.recall_all@5"."""

    question_id: str
    group: str
    scores: dict[str, float]


class GroupSummary(_Frozen):
    """Mean of each metric over a group of questions, and how many questions it averages."""

    means: dict[str, float]
    counts: dict[str, int]


class Evaluation(_Frozen):
    """Metric means overall and per question type or category."""

    overall: GroupSummary
    by_group: dict[str, GroupSummary]
    excluded: int = 0


def metric_key(level: Level, name: MetricName, k: int) -> str:
    """Name one metric value, e.g. "turn.recall_all@10"."""
    return f"{level}.{name}@{k}"


def _unique(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def collapse_to_sessions(
    ranked_turn_ids: Iterable[str], session_of: Mapping[str, str]
) -> list[str]:
    """Rank sessions by their first retrieved turn."""
    return _unique(session_of[turn_id] for turn_id in ranked_turn_ids)


def recall_any(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Return 1.0 if some relevant id is in the top k."""
    top = set(ranked[:k])
    return float(any(item in top for item in relevant))


def recall_all(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Return 1.0 if every relevant id is in the top k."""
    top = set(ranked[:k])
    return float(all(item in top for item in relevant))


def dcg(relevances: Sequence[float]) -> float:
    """Sum gains the way LongMemEval does: ranks 1 and 2 in full, rank r >= 2 over log2(r)."""
    return sum(
        gain if rank == 1 else gain / math.log2(rank)
        for rank, gain in enumerate(relevances, start=1)
    )


def ndcg_any(ranked: Sequence[str], relevant: Collection[str], k: int) -> float:
    """Return NDCG@k with binary relevance; 0.0 when nothing is relevant."""
    ideal = dcg([1.0] * min(len(set(relevant)), k))
    if ideal == 0.0:
        return 0.0
    gains = [float(item in relevant) for item in ranked[:k]]
    return dcg(gains) / ideal


def score_ranking(
    ranked: Sequence[str], relevant: Collection[str], level: Level, ks: Iterable[int] = DEFAULT_KS
) -> dict[str, float]:
    """Score one ranking against its relevant ids at every k; duplicates count once."""
    distinct = _unique(ranked)
    wanted = set(relevant)
    functions = {"recall_any": recall_any, "recall_all": recall_all, "ndcg_any": ndcg_any}
    return {
        metric_key(level, name, k): functions[name](distinct, wanted, k)
        for k in ks
        for name in METRIC_NAMES
    }


def score_question(
    question: Question,
    ranked_turn_ids: Sequence[str],
    session_of: Mapping[str, str],
    ks: Iterable[int] = DEFAULT_KS,
    ranked_session_ids: Sequence[str] | None = None,
) -> QuestionScores:
    """Score a question's turn ranking at session and turn level.

    Sessions are ranked by collapsing the turns unless `ranked_session_ids` is given (for
    systems that rank sessions on their own). A level whose relevant ids are empty is not
    scored, as a recall over nothing means nothing.
    """
    cutoffs = tuple(ks)
    sessions = (
        list(ranked_session_ids)
        if ranked_session_ids is not None
        else collapse_to_sessions(ranked_turn_ids, session_of)
    )
    scores: dict[str, float] = {}
    if question.answer_session_ids:
        scores |= score_ranking(sessions, question.answer_session_ids, "session", cutoffs)
    if question.answer_turn_ids:
        scores |= score_ranking(ranked_turn_ids, question.answer_turn_ids, "turn", cutoffs)
    return QuestionScores(question_id=question.id, group=question.type_or_category, scores=scores)


def _summary(scores: Sequence[QuestionScores]) -> GroupSummary:
    keys = _unique(key for item in scores for key in item.scores)
    values = {key: [item.scores[key] for item in scores if key in item.scores] for key in keys}
    return GroupSummary(
        means={key: fmean(found) for key, found in values.items()},
        counts={key: len(found) for key, found in values.items()},
    )


def aggregate(scores: Iterable[QuestionScores], excluded: int = 0) -> Evaluation:
    """Average question scores overall and per group (question type or category)."""
    items = list(scores)
    groups = sorted({item.group for item in items})
    return Evaluation(
        overall=_summary(items),
        by_group={
            group: _summary([item for item in items if item.group == group]) for group in groups
        },
        excluded=excluded,
    )


def evaluate(
    questions: Iterable[Question],
    rankings: Mapping[str, Sequence[str]],
    session_maps: Mapping[str, Mapping[str, str]],
    ks: Iterable[int] = DEFAULT_KS,
    sessions: Mapping[str, Sequence[str]] | None = None,
) -> Evaluation:
    """Score every non-abstention question's turn ranking and aggregate.

    `rankings` maps a question id to its ranked turn ids; `session_maps` maps a conversation
    id to its turn -> session mapping (see `datasets.turn_sessions`). `sessions`, when given,
    maps a question id to the session ranking the system made itself (else the turns'
    sessions are ranked by their first turn).
    """
    cutoffs = tuple(ks)
    asked = list(questions)
    kept = [question for question in asked if not question.abstention]
    scores = [
        score_question(
            question,
            rankings[question.id],
            session_maps[question.conversation_id],
            cutoffs,
            sessions[question.id] if sessions is not None else None,
        )
        for question in kept
    ]
    return aggregate(scores, excluded=len(asked) - len(kept))
