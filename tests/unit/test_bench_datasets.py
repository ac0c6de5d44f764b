"""Tests for the benchmark loaders (LongMemEval-S and LoCoMo)."""

# Asserts put the expected value first (STYLE.md), which SIM300 reads as a Yoda condition.

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from memoryd.services.bench.datasets import (
    EvidenceRepairs,
    load_locomo,
    load_longmemeval,
    parse_locomo_date,
    parse_longmemeval_date,
    split_evidence_ids,
    turn_sessions,
)

BENCH_DIR = Path(__file__).resolve().parents[3] / "shared" / "bench"
LONGMEMEVAL_DEV = BENCH_DIR / "longmemeval_s_dev.json.gz"
LOCOMO_DEV = BENCH_DIR / "locomo_dev.json"


def _turn(role: str, content: str, has_answer: bool = False) -> dict[str, Any]:
    return {"role": role, "content": content, "has_answer": has_answer}


def _longmemeval_record(question_id: str) -> dict[str, Any]:
    return {
        "question_id": question_id,
        "question_type": "multi-session",
        "question": "How many bikes do I own?",
        "question_date": "2023/06/01 (Thu) 09:00",
        "answer": 3,
        "answer_session_ids": ["answer_1"],
        "haystack_dates": [
            "2023/05/30 (Tue) 23:40",
            "2023/05/01 (Mon) 08:05",
            "2023/05/20 (Sat) 10:00",
        ],
        "haystack_session_ids": ["answer_1", "filler", "filler"],
        "haystack_sessions": [
            [_turn("user", "I bought a third bike.", True), _turn("assistant", "Nice!")],
            [_turn("user", "Tell me a joke.")],
            [_turn("user", "Tell me a joke.")],
        ],
    }


@pytest.fixture
def longmemeval_file(tmp_path: Path) -> Path:
    path = tmp_path / "lme.json.gz"
    records = [_longmemeval_record("q1"), _longmemeval_record("q2_abs")]
    with gzip.open(path, "wt", encoding="utf-8") as stream:
        json.dump(records, stream)
    return path


def _locomo_sample(sample_id: str) -> dict[str, Any]:
    return {
        "sample_id": sample_id,
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_2_date_time": "12:48 am on 1 February, 2023",
            "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "I moved to Oslo."}],
            "session_1_date_time": "1:56 pm on 8 May, 2022",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "Look at my dog!"},
                {
                    "speaker": "Bob",
                    "dia_id": "D1:2",
                    "text": "So cute.",
                    "blip_caption": "a photo of a puppy",
                },
            ],
        },
        "qa": [
            {
                "question": "Where and what?",
                "answer": "Oslo",
                "evidence": ["D1:1; D2:1"],
                "category": 1,
            },
            {"question": "When?", "answer": 2022, "evidence": ["D1:2", "D"], "category": 2},
            {"question": "Trick?", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
        ],
        "observation": {"ignored": True},
    }


@pytest.fixture
def locomo_file(tmp_path: Path) -> Path:
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps([_locomo_sample("conv-a"), _locomo_sample("conv-b")]))
    return path


def test_longmemeval_date_parses_as_utc() -> None:
    """A LongMemEval date string becomes the same minute in UTC."""
    assert datetime(2023, 5, 30, 23, 40, tzinfo=UTC) == parse_longmemeval_date(
        "2023/05/30 (Tue) 23:40"
    )


def test_locomo_date_parses_am_pm() -> None:
    """A LoCoMo date string honours am/pm, including the 12 am hour."""
    assert datetime(2023, 5, 8, 13, 56, tzinfo=UTC) == parse_locomo_date("1:56 pm on 8 May, 2023")
    assert datetime(2023, 2, 1, 0, 48, tzinfo=UTC) == parse_locomo_date(
        "12:48 am on 1 February, 2023"
    )


def test_joined_evidence_ids_are_split() -> None:
    """An evidence entry naming two turns yields both turn ids."""
    assert ["D8:6", "D9:17"] == split_evidence_ids("D8:6; D9:17")


def test_longmemeval_turn_ids_and_answers(longmemeval_file: Path) -> None:
    """Turn ids are "<session>:<index>" and answer turns come from has_answer."""
    question = load_longmemeval(longmemeval_file).questions[0]
    assert ("answer_1:0",) == question.answer_turn_ids
    assert ("answer_1",) == question.answer_session_ids
    assert "3" == question.answer


def test_longmemeval_sessions_are_chronological(longmemeval_file: Path) -> None:
    """Haystack sessions come back sorted by date, not in the file's shuffled order."""
    conversation = load_longmemeval(longmemeval_file).conversations[0]
    assert ["filler", "filler#2", "answer_1"] == [s.id for s in conversation.sessions]


def test_longmemeval_repeated_session_ids_stay_unique(longmemeval_file: Path) -> None:
    """A session repeated in the haystack gets a suffixed id so turn ids never collide."""
    conversation = load_longmemeval(longmemeval_file).conversations[0]
    assert {
        "filler:0": "filler",
        "filler#2:0": "filler#2",
        "answer_1:0": "answer_1",
        "answer_1:1": "answer_1",
    } == turn_sessions(conversation)


def test_longmemeval_abstention_from_id_suffix(longmemeval_file: Path) -> None:
    """Questions whose id ends in _abs are marked as abstention."""
    dataset = load_longmemeval(longmemeval_file)
    assert [False, True] == [question.abstention for question in dataset.questions]


def test_longmemeval_subset_by_count_and_ids(longmemeval_file: Path) -> None:
    """A subset keeps the first N questions or the listed ids, each with its conversation."""
    assert ["q1"] == [q.id for q in load_longmemeval(longmemeval_file, subset=1).questions]
    chosen = load_longmemeval(longmemeval_file, subset=["q2_abs"])
    assert ["q2_abs"] == [c.id for c in chosen.conversations]


def test_unknown_subset_id_is_an_error(longmemeval_file: Path) -> None:
    """Asking for a question that is not in the file fails loudly."""
    with pytest.raises(KeyError, match="nope"):
        load_longmemeval(longmemeval_file, subset=["nope"])


def test_locomo_turns_keep_image_captions(locomo_file: Path) -> None:
    """An image turn's text carries its caption, and the first speaker is the user."""
    turns = load_locomo(locomo_file).conversations[0].sessions[0].turns
    assert "So cute. [image: a photo of a puppy]" == turns[1].text
    assert ["user", "assistant"] == [turn.role for turn in turns]


def test_locomo_evidence_is_repaired_and_counted(locomo_file: Path) -> None:
    """Joined evidence ids are split, bare "D" dropped, and both counted per dataset."""
    dataset = load_locomo(locomo_file)
    first, second, _ = dataset.questions[:3]
    assert ("D1:1", "D2:1") == first.answer_turn_ids
    assert ("session_1", "session_2") == first.answer_session_ids
    assert ("D1:2",) == second.answer_turn_ids
    assert EvidenceRepairs(split=2, dropped=2) == dataset.evidence


def test_locomo_category_five_is_excluded(locomo_file: Path) -> None:
    """Adversarial questions are marked abstention; the others keep their category name."""
    questions = load_locomo(locomo_file, subset=1).questions
    assert [("multi-hop", False), ("temporal", False), ("adversarial", True)] == [
        (question.type_or_category, question.abstention) for question in questions
    ]


def test_locomo_questions_dated_after_last_session(locomo_file: Path) -> None:
    """Questions carry the date of the conversation's last session."""
    question = load_locomo(locomo_file, subset=["conv-b"]).questions[0]
    assert datetime(2023, 2, 1, 0, 48, tzinfo=UTC) == question.date
    assert "conv-b" == question.conversation_id


@pytest.mark.skipif(not LONGMEMEVAL_DEV.exists(), reason="benchmark data not present")
def test_longmemeval_dev_file_loads() -> None:
    """The shipped dev file loads 51 questions whose answer sessions are in their haystack."""
    dataset = load_longmemeval(LONGMEMEVAL_DEV)
    sessions = {c.id: {s.id for s in c.sessions} for c in dataset.conversations}
    assert 51 == len(dataset.questions)
    assert 2 == sum(question.abstention for question in dataset.questions)
    assert all(set(q.answer_session_ids) <= sessions[q.conversation_id] for q in dataset.questions)


@pytest.mark.skipif(not LOCOMO_DEV.exists(), reason="benchmark data not present")
def test_locomo_dev_file_loads() -> None:
    """The shipped dev file has one joined evidence id to split and none to drop."""
    dataset = load_locomo(LOCOMO_DEV)
    assert ["conv-26", "conv-30", "conv-41"] == [c.id for c in dataset.conversations]
    assert EvidenceRepairs(split=1, dropped=0) == dataset.evidence
