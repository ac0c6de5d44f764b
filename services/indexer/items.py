"""Turn log events into index operations (pure): what to upsert, what to delete.

Adding a retrievable kind is one function here (event -> ``Upsert``) plus a line in
``plan``: the projection embeds and applies whatever ``plan`` returns, in log order.

A turn is indexed under several keys, all mapping back to the turn (same ``turn_id``,
``extra["of"]`` naming the turn's own point): the turn itself; a window (the previous turn of
the conversation and this one) when the previous turn is short, so a reply like "Yes, twice a
week" is found by the question it answers; and its first-person sentences ("I adopted a
greyhound last month"), which a long turn would otherwise drown. Keys are a pure function of
the events: the previous turn of each conversation is state the projection folds and passes in.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from memoryd.shared.adapters.index import IndexPayload, Kind, ScopeFilter
from memoryd.shared.contracts.catalog import AnyEvent
from memoryd.shared.contracts.events import (
    Category,
    MemoryForgotten,
    MemoryRemembered,
    SessionEnded,
    TurnRecorded,
    derived_id,
)
from memoryd.shared.contracts.retrieval import MemoryExpired
from memoryd.shared.contracts.scope import Scope
from memoryd.shared.domain.items import forget_ids, memory_text, point_id, turn_text
from memoryd.shared.domain.memories import memory_identity

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Upsert:
    """Embed ``text`` and store it as point ``id`` (replacing any point with that id).

    With ``parts``, the dense vector is composed from the parts' vectors (``composed``)
    instead of embedding ``text``, which is still what BM25 and the payload hold.
    """

    id: uuid.UUID
    text: str
    payload: IndexPayload
    parts: tuple[str, ...] = ()

    def texts(self) -> tuple[str, ...]:
        """Return the texts the model embeds for this point."""
        return self.parts or (self.text,)


def composed(vectors: Sequence[npt.NDArray[np.float32]], texts: Sequence[str]) -> Vector:
    """Return the unit vector of the parts' unit vectors, each weighted by the square root
    of its word count.

    A window's own embedding is close to this (mean cosine 0.95 over 258 LongMemEval
    windows; 0.94 with equal weights or weights by word count), at no model cost: its
    parts are turns, embedded as turn keys anyway.
    """
    weights = np.sqrt(np.array([max(1, len(text.split())) for text in texts], dtype=np.float32))
    total = (np.stack(vectors).astype(np.float32) * weights[:, None]).sum(axis=0)
    norm = float(np.linalg.norm(total))
    unit: Vector = total / norm if norm > 0 else total
    return unit


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove these points."""

    ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class DeleteWhere:
    """Remove every point inside this scope."""

    filter: ScopeFilter


Operation = Upsert | Delete | DeleteWhere


def _payload(scope: Scope, kind: Kind, event: AnyEvent, item_id: uuid.UUID) -> dict[str, object]:
    return {
        "tenant": scope.tenant,
        "user_id": scope.user_id,
        "agent_id": scope.agent_id,
        "session_id": scope.session_id,
        "namespace": scope.namespace,
        "kind": kind,
        "occurred_at": event.occurred_at.timestamp(),
        "turn_id": str(item_id),
        "source_event_id": event.event_id,
    }


# A window joins the previous turn only when that turn is short (a question, a reply): a
# long turn carries its own context and would swamp the window's embedding.
WINDOW_MAX_WORDS = 40
FACT_MIN_WORDS = 4
MAX_FACTS_PER_TURN = 8
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
# "I", "My", and the contractions ("I'm", "I've": the apostrophe ends the word).
_FIRST_PERSON_START = re.compile(r"^(i|my)\b", re.IGNORECASE)
# "Caroline: I went ..." - a chat transcript names its speaker before the words.
_SPEAKER = re.compile(r"^([A-Z][\w'.-]{0,30}(?: [A-Z][\w'.-]{0,30})?): ")


def speaker_of(text: str) -> str | None:
    """Return the speaker a transcript line names before its words ("Name: ..."), if any."""
    match = _SPEAKER.match(text)
    return match.group(1) if match else None


def first_person_facts(text: str) -> list[str]:
    """Return the sentences of a text that state something about the speaker ("I ...", "My ...").

    Sentences of fewer than ``FACT_MIN_WORDS`` words ("I see.") say nothing; at most
    ``MAX_FACTS_PER_TURN`` are kept, in order, without repeats.
    """
    speaker = speaker_of(text)
    body = text[len(speaker) + 2 :] if speaker else text
    facts: list[str] = []
    for sentence in _SENTENCE_END.split(body):
        sentence = sentence.strip()
        if (
            _FIRST_PERSON_START.match(sentence)
            and len(sentence.split()) >= FACT_MIN_WORDS
            and sentence not in facts
        ):
            facts.append(sentence)
    return facts[:MAX_FACTS_PER_TURN]


def conversation_key(scope: Scope) -> uuid.UUID:
    """Return the id of the conversation a turn belongs to (its whole scope)."""
    return _conversation_key(
        scope.tenant, scope.user_id, scope.agent_id, scope.session_id or "", scope.namespace
    )


# A uuid5 per turn, of a few thousand conversations at most in a batch: remembered.
@functools.lru_cache(maxsize=16_384)
def _conversation_key(*parts: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, "memoryd-conversation/" + "/".join(parts))


@dataclass(frozen=True, slots=True)
class _TurnKeying:
    """What every key of one turn shares: its scope fields, its own point and its speaker."""

    fields: dict[str, object]
    of: str  # the turn's own point id, which every key names
    speaker: str | None

    def payload(self, key: str, text: str) -> IndexPayload:
        extra: dict[str, object] = {"key": key, "of": self.of}
        if self.speaker:
            extra["speaker"] = self.speaker
        if key != "turn":
            extra["text"] = text
        return IndexPayload.model_validate(self.fields | {"extra": extra})


def _turn_key(event: TurnRecorded) -> tuple[Upsert, _TurnKeying]:
    """Return a turn's own point and what its other keys share with it."""
    own = point_id(event.event_id, "turn", event.scope)
    text = turn_text(event)
    fields = _payload(event.scope, "turn", event, event.event_id)
    keying = _TurnKeying(fields, str(own), speaker_of(text))
    return Upsert(own, text, keying.payload("turn", text)), keying


def turn_upsert(event: TurnRecorded) -> Upsert:
    """Index a turn as one point whose provenance is the turn's event id."""
    return _turn_key(event)[0]


@dataclass(frozen=True, slots=True)
class KeyOptions:
    """Which extra keys a turn gets besides itself, and how a window's vector is made."""

    windows: bool = True
    facts: bool = True
    agent_facts: bool = False
    # A window's vector composed from its two turns' vectors (no model call of its own).
    composed_windows: bool = False


def turn_keys(event: TurnRecorded, previous: str | None, options: KeyOptions) -> list[Upsert]:
    """Index a turn under all its keys: itself, its window, its first-person sentences.

    ``previous`` is the text of the conversation's previous turn (None: this is the first).
    Facts come from the user's side unless ``options.agent_facts``: an assistant's "I" is
    about the assistant, but when the other side is a person (a transcript of two people) it
    is not.
    """
    turn, keying = _turn_key(event)
    keys = [turn]
    if previous is not None and len(previous.split()) <= WINDOW_MAX_WORDS:
        keys.append(window_key(keying, turn, previous, options.composed_windows))
    if options.facts:
        keys += fact_keys(event, keying, turn, options.agent_facts)
    return keys


def window_key(keying: _TurnKeying, turn: Upsert, previous: str, compose: bool) -> Upsert:
    """Key a turn by the previous turn and itself together (``compose``: its vector is
    composed from theirs)."""
    payload = keying.payload("window", turn.text)
    parts = (previous, turn.text) if compose else ()
    return Upsert(derived_id(turn.id, "window"), f"{previous}\n{turn.text}", payload, parts)


def fact_keys(
    event: TurnRecorded, keying: _TurnKeying, turn: Upsert, agent_facts: bool
) -> list[Upsert]:
    """Key a turn by each first-person sentence of its user's side (the agent's too if asked)."""
    sides = (event.query, event.response) if agent_facts else (event.query,)
    found = [fact for side in sides for fact in first_person_facts(side)]
    if not found:
        return []
    payload = keying.payload("fact", turn.text)
    return [
        Upsert(derived_id(turn.id, f"fact.{n}"), fact, payload)
        for n, fact in enumerate(found[:MAX_FACTS_PER_TURN])
        if fact != turn.text
    ]


def memory_upsert(event: MemoryRemembered) -> Upsert:
    """Index an explicit memory (key and content), keyed by its identity."""
    memory_id = memory_identity(event)
    fields = _payload(event.scope, "memory", event, memory_id)
    fields |= {
        "turn_id": None,
        "category": event.category.value,
        "memory_type": event.memory_type.value,
        "importance": event.importance,
        "evergreen": event.evergreen,
        "extra": {"memory_id": str(memory_id), "key": event.key},
    }
    text = memory_text(event)
    return Upsert(
        point_id(memory_id, "memory", event.scope), text, IndexPayload.model_validate(fields)
    )


def session_filter(event: SessionEnded) -> ScopeFilter:
    """Return the scope of the conversation memories a session end clears."""
    scope = event.scope
    return ScopeFilter(
        tenant=scope.tenant,
        user_id=scope.user_id,
        session_id=scope.session_id,
        kinds=("memory",),
        categories=(Category.CONVERSATION.value,),
    )


def operation(event: AnyEvent) -> Operation | None:
    """Return what one non-turn event does to the index (None: nothing)."""
    if isinstance(event, MemoryRemembered):
        return memory_upsert(event)
    if isinstance(event, MemoryForgotten):
        return Delete(forget_ids(event))
    if isinstance(event, MemoryExpired):
        return Delete((point_id(event.memory_id, "memory", event.scope),))
    if isinstance(event, SessionEnded):
        return DeleteWhere(session_filter(event))
    return None


def plan(
    events: Sequence[AnyEvent],
    previous: Mapping[uuid.UUID, str] | None = None,
    options: KeyOptions | None = None,
) -> tuple[list[Operation], dict[uuid.UUID, str]]:
    """Return the index operations of a batch in log order, and each conversation's last turn.

    ``previous`` maps a conversation (``conversation_key``) to the text of its last turn
    before this batch; the second value is the same map after it, for the next batch.
    """
    options = options or KeyOptions()
    last = dict(previous or {})
    operations: list[Operation] = []
    for event in events:
        if isinstance(event, TurnRecorded):
            conversation = conversation_key(event.scope)
            before = last.get(conversation) if options.windows else None
            keys = turn_keys(event, before, options)
            operations += keys
            last[conversation] = keys[0].text  # the turn's own key
            continue
        op = operation(event)
        if op is not None:
            operations.append(op)
    return operations, last
