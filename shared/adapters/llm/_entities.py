"""Spot named entities in English text by capitalisation, and type them by nearby cue words."""

import re
from collections.abc import Iterator
from dataclasses import dataclass

from memoryd.shared.adapters.llm._text import FILLER, sentences, word_set
from memoryd.shared.adapters.llm.port import EntityType
from memoryd.shared.domain.text import fold, host, is_stopword

__all__ = ["NamedSpan", "named_spans"]


@dataclass(frozen=True, slots=True)
class NamedSpan:
    """A capitalised name found in a text, with the type its context suggests."""

    name: str
    type: EntityType


_TOKEN = re.compile(r"[^\W\d_][\w'\u2019&.-]*[\w]|[^\W\d_]")
_CONNECTORS = frozenset({"of", "de", "da", "do", "del", "della", "di", "van", "von", "der", "la"})
# Capitalised only because they open a sentence, or names of no use to a knowledge graph.
_NOT_NAMES = word_set(
    """
    i i'm i've i'd i'll user assistant agent ai yesterday tomorrow tonight today please thanks
    thank hello hi hey yes yeah no okay ok sure well also however maybe perhaps sorry great
    cool nice actually anyway btw lol oh wow first then next finally now here there
    monday tuesday wednesday thursday friday saturday sunday january february march april may
    june july august september october november december
    """
)
_TITLES = word_set("mr mrs ms miss dr prof sir madam aunt uncle grandma grandpa")
_ORG_WORDS = word_set(
    """
    inc corp corporation ltd llc gmbh plc co company bank university college school institute
    foundation agency group labs lab hospital ministry association club team studio studios
    airlines technologies systems partners capital ventures council department
    """
)
_PLACE_WORDS = word_set(
    """
    city town village street st avenue road river lake mountain mountains island islands park
    beach county state republic kingdom bay valley square bridge airport station coast desert
    forest ocean sea mount
    """
)
_PLACE_BEFORE = word_set("in to from near visit visited visiting around across toward towards into")
_PERSON_BEFORE = word_set(
    """
    named called met meet told asked friend wife husband son daughter brother sister mother
    father mom mum dad boss colleague partner boyfriend girlfriend cousin fiance fiancee
    """
)
_WORK_VERBS = word_set("work works worked working employed hired intern interning")
_MAX_ACRONYM = 6


@dataclass(frozen=True, slots=True)
class _Token:
    """A word with its place in the sentence."""

    text: str
    start: int
    end: int


def _is_capitalised(word: str) -> bool:
    """Say whether a word is written with a leading capital letter."""
    return word[0].isupper()


def _runs(sentence: str) -> Iterator[tuple[int, list[_Token]]]:
    """Yield runs of capitalised words joined only by spaces or connectors, with their index."""
    tokens = [_Token(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(sentence)]
    index = 0
    while index < len(tokens):
        if not _is_capitalised(tokens[index].text):
            index += 1
            continue
        run = [tokens[index]]
        cursor = index + 1
        while cursor < len(tokens) and sentence[run[-1].end : tokens[cursor].start].isspace():
            word = tokens[cursor].text
            if word.lower() in _NOT_NAMES:
                break
            joins = word.lower() in _CONNECTORS and cursor + 1 < len(tokens)
            if _is_capitalised(word):
                run.append(tokens[cursor])
            elif joins and _is_capitalised(tokens[cursor + 1].text):
                run.extend(tokens[cursor : cursor + 2])
                cursor += 1
            else:
                break
            cursor += 1
        yield index, run
        index = cursor


def _says_nothing(token: _Token) -> bool:
    """Say whether a word is a stopword or chat filler ("The", "Thanks", "It's")."""
    word = fold(token.text)
    return is_stopword(word) or host(word) in FILLER


def _not_name(token: _Token) -> bool:
    """Say whether a capitalised word is never part of a name ("Yesterday", "Monday")."""
    return token.text.lower() in _NOT_NAMES


def _trim(run: list[_Token], opens_sentence: bool) -> list[_Token]:
    """Drop words that are capitalised for grammar, not because they name something."""
    words = list(run)
    if opens_sentence and words and (_says_nothing(words[0]) or _not_name(words[0])):
        words = words[1:]
    while words and _not_name(words[0]):
        words = words[1:]
    if len(words) == 1 and _says_nothing(words[0]):
        return []
    return words


def _name(words: list[_Token]) -> str:
    """Join a run's words into a name, without a trailing possessive."""
    name = " ".join(word.text for word in words).replace("\u2019", "'")
    return name.removesuffix("'s").rstrip(".-&'")


def _type(words: list[_Token], before: list[str]) -> EntityType:
    """Type a name by its own words first, then by the words just before it."""
    first, last = words[0].text.lower().rstrip("."), words[-1].text.lower().rstrip(".")
    previous = before[-1] if before else ""
    if first in _TITLES:
        return "person"
    # "Acme Corp", "University of Porto"; "Lake Como", "Atlantic Ocean".
    if first in _ORG_WORDS or last in _ORG_WORDS:
        return "org"
    if first in _PLACE_WORDS or last in _PLACE_WORDS:
        return "place"
    if previous == "joined" or (
        previous in {"at", "for", "by"} and len(before) > 1 and before[-2] in _WORK_VERBS
    ):
        return "org"
    if previous in _PLACE_BEFORE:
        return "place"
    if previous in _PERSON_BEFORE:
        return "person"
    text = words[0].text
    if len(words) == 1 and text.isupper() and 1 < len(text) <= _MAX_ACRONYM:
        return "org"
    return "thing"


def _sentence_spans(sentence: str) -> Iterator[NamedSpan]:
    """Yield the named spans of one sentence, in order."""
    lowered = [m.group().lower() for m in _TOKEN.finditer(sentence)]
    for index, run in _runs(sentence):
        words = _trim(run, opens_sentence=index == 0)
        if words:
            skipped = len(run) - len(words)
            yield NamedSpan(_name(words), _type(words, lowered[: index + skipped]))


def named_spans(text: str) -> list[NamedSpan]:
    """Return each capitalised name once, typed by its first telling occurrence."""
    types: dict[str, EntityType] = {}
    names: dict[str, str] = {}
    for sentence in sentences(text):
        for span in _sentence_spans(sentence):
            key = span.name.casefold()
            names.setdefault(key, span.name)
            if types.get(key, "thing") == "thing":
                types[key] = span.type
    return [NamedSpan(names[key], types[key]) for key in names]
