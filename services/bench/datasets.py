"""Load the retrieval benchmarks (LongMemEval-S, LoCoMo) into source-neutral models.

Both benchmarks become the same shape: conversations made of dated sessions of turns, and
questions that name the sessions and turns holding their answer. The benchmark runner and the
metrics only ever see these models, never the source JSON.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "LOCOMO_CATEGORIES",
    "BenchDataset",
    "Conversation",
    "EvidenceRepairs",
    "Question",
    "Role",
    "Session",
    "Subset",
    "Turn",
    "load_locomo",
    "load_longmemeval",
    "parse_locomo_date",
    "parse_longmemeval_date",
    "split_evidence_ids",
    "turn_sessions",
]

Role = Literal["user", "assistant"]
# First N questions (LongMemEval) or conversations (LoCoMo), or an explicit list of their ids.
Subset = int | Sequence[str] | None

LOCOMO_CATEGORIES: Mapping[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
# Adversarial questions have no answer in the conversation, so retrieval metrics skip them.
_LOCOMO_EXCLUDED_CATEGORY = 5
_LOCOMO_SESSION_KEY = re.compile(r"session_(\d+)")
_EVIDENCE_SEPARATORS = re.compile(r"[;,\s]+")
_Item = TypeVar("_Item")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Turn(_Frozen):
    """One utterance; `role` is the memoryd view, `speaker` the source's name for it."""

    id: str
    role: Role
    speaker: str
    text: str
    has_answer: bool = False


class Session(_Frozen):
    """A dated run of turns."""

    id: str
    date: datetime
    turns: tuple[Turn, ...]


class Conversation(_Frozen):
    """Everything one user scope said, sessions in chronological order."""

    id: str
    sessions: tuple[Session, ...]


class Question(_Frozen):
    """A benchmark question and where its answer lives in its conversation."""

    id: str
    conversation_id: str
    text: str
    answer: str
    date: datetime
    # When the question was asked, if the dataset says (LoCoMo's ``date`` is a stand-in).
    asked_at: datetime | None = None
    type_or_category: str
    answer_session_ids: tuple[str, ...]
    answer_turn_ids: tuple[str, ...]
    abstention: bool


class EvidenceRepairs(_Frozen):
    """How many malformed evidence ids a loader had to split or drop."""

    split: int = 0
    dropped: int = 0


class BenchDataset(_Frozen):
    """A loaded benchmark: conversations, the questions asked of them, and repair counts."""

    name: str
    conversations: tuple[Conversation, ...]
    questions: tuple[Question, ...]
    evidence: EvidenceRepairs = EvidenceRepairs()


class _LongMemEvalTurn(BaseModel):
    role: Role
    content: str
    has_answer: bool = False


class _LongMemEvalRecord(BaseModel):
    question_id: str
    question_type: str
    question: str
    question_date: str
    answer: str | int
    answer_session_ids: list[str]
    haystack_dates: list[str]
    haystack_session_ids: list[str]
    haystack_sessions: list[list[_LongMemEvalTurn]]


class _LocomoTurn(BaseModel):
    speaker: str
    dia_id: str
    text: str
    blip_caption: str | None = None


class _LocomoQuestion(BaseModel):
    question: str
    answer: str | int | None = None
    evidence: list[str] = []
    category: int


class _LocomoSample(BaseModel):
    sample_id: str
    conversation: dict[str, Any]
    qa: list[_LocomoQuestion]


def parse_longmemeval_date(text: str) -> datetime:
    """Parse a LongMemEval date such as "2023/05/30 (Tue) 23:40" as UTC."""
    day, _weekday, clock = text.split()
    return datetime.strptime(f"{day} {clock}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def parse_locomo_date(text: str) -> datetime:
    """Parse a LoCoMo date such as "1:56 pm on 8 May, 2023" as UTC."""
    return datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def split_evidence_ids(raw: str) -> list[str]:
    """Split one raw evidence entry ("D8:6; D9:17") into its dialogue ids."""
    return [part for part in _EVIDENCE_SEPARATORS.split(raw) if part]


def turn_sessions(conversation: Conversation) -> dict[str, str]:
    """Map every turn id of a conversation to the id of its session."""
    return {turn.id: session.id for session in conversation.sessions for turn in session.turns}


def _read_json(path: Path) -> Any:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as stream:
            return json.load(stream)
    with path.open(encoding="utf-8") as stream:
        return json.load(stream)


def _select(items: Sequence[_Item], ids: Sequence[str], subset: Subset, kind: str) -> list[_Item]:
    """Keep the first N items, or the items whose id is listed, in source order."""
    if subset is None:
        return list(items)
    if isinstance(subset, int):
        return list(items[:subset])
    wanted = set(subset)
    unknown = wanted - set(ids)
    if unknown:
        raise KeyError(f"unknown {kind} ids: {sorted(unknown)}")
    return [item for item, item_id in zip(items, ids, strict=True) if item_id in wanted]


def _unique_session_ids(session_ids: Sequence[str]) -> list[str]:
    """Suffix repeated session ids ("x", "x#2") so every turn id stays unique."""
    seen: dict[str, int] = {}
    unique = []
    for session_id in session_ids:
        seen[session_id] = seen.get(session_id, 0) + 1
        count = seen[session_id]
        unique.append(session_id if count == 1 else f"{session_id}#{count}")
    return unique


def _longmemeval_session(session_id: str, date: str, turns: Sequence[_LongMemEvalTurn]) -> Session:
    return Session(
        id=session_id,
        date=parse_longmemeval_date(date),
        turns=tuple(
            Turn(
                id=f"{session_id}:{index}",
                role=turn.role,
                speaker=turn.role,
                text=turn.content,
                has_answer=turn.has_answer,
            )
            for index, turn in enumerate(turns)
        ),
    )


def _chronological(sessions: Iterable[Session]) -> tuple[Session, ...]:
    # LongMemEval shuffles its haystack; a memory service sees sessions in time order.
    return tuple(sorted(sessions, key=lambda session: session.date))


def _longmemeval_sessions(record: _LongMemEvalRecord) -> tuple[Session, ...]:
    session_ids = _unique_session_ids(record.haystack_session_ids)
    return _chronological(
        _longmemeval_session(session_id, date, turns)
        for session_id, date, turns in zip(
            session_ids, record.haystack_dates, record.haystack_sessions, strict=True
        )
    )


def _longmemeval_pair(record: _LongMemEvalRecord) -> tuple[Conversation, Question]:
    sessions = _longmemeval_sessions(record)
    answer_turns = tuple(
        turn.id for session in sessions for turn in session.turns if turn.has_answer
    )
    conversation = Conversation(id=record.question_id, sessions=sessions)
    question = Question(
        id=record.question_id,
        conversation_id=conversation.id,
        text=record.question,
        answer=str(record.answer),
        date=parse_longmemeval_date(record.question_date),
        asked_at=parse_longmemeval_date(record.question_date),
        type_or_category=record.question_type,
        answer_session_ids=tuple(record.answer_session_ids),
        answer_turn_ids=answer_turns,
        abstention=record.question_id.endswith("_abs"),
    )
    return conversation, question


def load_longmemeval(path: Path, subset: Subset = None) -> BenchDataset:
    """Load LongMemEval-S: one conversation (the question's haystack) per question."""
    records = [_LongMemEvalRecord.model_validate(item) for item in _read_json(path)]
    ids = [record.question_id for record in records]
    pairs = [_longmemeval_pair(record) for record in _select(records, ids, subset, "question")]
    return BenchDataset(
        name="longmemeval_s",
        conversations=tuple(conversation for conversation, _ in pairs),
        questions=tuple(question for _, question in pairs),
    )


def _locomo_text(turn: _LocomoTurn) -> str:
    # The image itself is gone; its caption is the only trace of what was shared.
    if turn.blip_caption is None:
        return turn.text
    return f"{turn.text} [image: {turn.blip_caption}]"


def _locomo_turn(turn: _LocomoTurn, first_speaker: str, evidence: set[str]) -> Turn:
    return Turn(
        id=turn.dia_id,
        role="user" if turn.speaker == first_speaker else "assistant",
        speaker=turn.speaker,
        text=_locomo_text(turn),
        has_answer=turn.dia_id in evidence,
    )


def _locomo_session_numbers(conversation: Mapping[str, Any]) -> list[int]:
    keys = (_LOCOMO_SESSION_KEY.fullmatch(key) for key in conversation)
    return sorted(int(match.group(1)) for match in keys if match)


def _locomo_sessions(conversation: Mapping[str, Any], evidence: set[str]) -> tuple[Session, ...]:
    first_speaker = str(conversation["speaker_a"])
    return _chronological(
        Session(
            id=f"session_{number}",
            date=parse_locomo_date(conversation[f"session_{number}_date_time"]),
            turns=tuple(
                _locomo_turn(_LocomoTurn.model_validate(raw), first_speaker, evidence)
                for raw in conversation[f"session_{number}"]
            ),
        )
        for number in _locomo_session_numbers(conversation)
    )


def _repair_evidence(
    raw_ids: Iterable[str], known_turns: Mapping[str, str]
) -> tuple[list[str], EvidenceRepairs]:
    """Split joined evidence ids and drop the ones naming no turn, counting both."""
    kept: list[str] = []
    split = dropped = 0
    for raw in raw_ids:
        parts = split_evidence_ids(raw)
        split += len(parts) > 1
        dropped += sum(part not in known_turns for part in parts)
        kept.extend(part for part in parts if part in known_turns and part not in kept)
    return kept, EvidenceRepairs(split=split, dropped=dropped)


def _all_evidence(sample: _LocomoSample) -> set[str]:
    return {
        part
        for qa in sample.qa
        if qa.category != _LOCOMO_EXCLUDED_CATEGORY
        for raw in qa.evidence
        for part in split_evidence_ids(raw)
    }


def _locomo_question(
    sample_id: str,
    index: int,
    qa: _LocomoQuestion,
    known_turns: Mapping[str, str],
    date: datetime,
) -> tuple[Question, EvidenceRepairs]:
    turn_ids, repairs = _repair_evidence(qa.evidence, known_turns)
    session_ids = list(dict.fromkeys(known_turns[turn_id] for turn_id in turn_ids))
    question = Question(
        id=f"{sample_id}:q{index}",
        conversation_id=sample_id,
        text=qa.question,
        answer="" if qa.answer is None else str(qa.answer),
        date=date,
        type_or_category=LOCOMO_CATEGORIES[qa.category],
        answer_session_ids=tuple(session_ids),
        answer_turn_ids=tuple(turn_ids),
        abstention=qa.category == _LOCOMO_EXCLUDED_CATEGORY,
    )
    return question, repairs


def _locomo_sample(
    sample: _LocomoSample,
) -> tuple[Conversation, list[Question], EvidenceRepairs]:
    conversation = Conversation(
        id=sample.sample_id,
        sessions=_locomo_sessions(sample.conversation, _all_evidence(sample)),
    )
    known_turns = turn_sessions(conversation)
    # LoCoMo questions carry no date: they are asked after the last session.
    asked_at = conversation.sessions[-1].date
    results = [
        _locomo_question(sample.sample_id, index, qa, known_turns, asked_at)
        for index, qa in enumerate(sample.qa)
    ]
    questions = [question for question, _ in results]
    return conversation, questions, _sum_repairs(repairs for _, repairs in results)


def _sum_repairs(repairs: Iterable[EvidenceRepairs]) -> EvidenceRepairs:
    items = list(repairs)
    return EvidenceRepairs(
        split=sum(item.split for item in items), dropped=sum(item.dropped for item in items)
    )


def load_locomo(path: Path, subset: Subset = None) -> BenchDataset:
    """Load LoCoMo: one conversation per sample; category 5 is marked as abstention."""
    samples = [_LocomoSample.model_validate(item) for item in _read_json(path)]
    ids = [sample.sample_id for sample in samples]
    loaded = [_locomo_sample(sample) for sample in _select(samples, ids, subset, "sample")]
    return BenchDataset(
        name="locomo",
        conversations=tuple(conversation for conversation, _, _ in loaded),
        questions=tuple(question for _, questions, _ in loaded for question in questions),
        evidence=_sum_repairs(repairs for _, _, repairs in loaded),
    )
