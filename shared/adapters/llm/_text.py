"""Split, rank and summarise English text for the offline extractor.

What a word is, its stem and the stopwords come from ``shared.domain.text``, so a keyword the
extractor picks is a term the search index knows.
"""

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

from memoryd.shared.domain.text import host, is_stopword, stem, words

__all__ = [
    "FILLER",
    "clip",
    "content_words",
    "extractive_summary",
    "keywords",
    "sentences",
    "stems",
    "word_set",
]


def word_set(text: str) -> frozenset[str]:
    """Return the whitespace-separated words of a word list written as prose."""
    return frozenset(text.split())


# Chat filler: words that are no stopwords to a search (a query may well ask what someone
# "said" or "wanted") but never name what a page is about.
FILLER = word_set(
    """
    actually already also anything bit cannot could even everything get getting go going gone
    got hello hey hi however kind know let like look lot lots made make many may maybe might
    much must need nope nothing oh ok okay one ought please really said say see shall since
    something sort still sure tell thank thanks thing things think though thought today told
    want wanted way well would yeah yep yes
    """
)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_MIN_KEYWORD_LENGTH = 3
_ELLIPSIS = "…"


def sentences(text: str) -> list[str]:
    """Split text into trimmed, non-empty sentences."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def stems(tokens: Iterable[str]) -> tuple[str, ...]:
    """Stem each word, in order."""
    return tuple(stem(token) for token in tokens)


# A function of the word alone, asked for every word of every page the extractor reads (a
# chain summary reads the same seven pages turn after turn): 7 us a word, a cache look-up
# when cached. Chat reuses a small vocabulary.
@lru_cache(maxsize=1 << 16)
def _is_content(word: str) -> bool:
    """Say whether a word can carry a topic: long enough, with a letter, no stopword or filler."""
    return (
        len(word) >= _MIN_KEYWORD_LENGTH
        and any(char.isalpha() for char in word)
        and not is_stopword(word)
        and host(word) not in FILLER
    )


def content_words(text: str) -> list[str]:
    """Return the topic-bearing words of a text, in order, repeats kept."""
    return [word for word in words(text) if _is_content(word)]


@lru_cache(maxsize=1 << 14)
def _analysed(text: str) -> tuple[int, tuple[tuple[str, str], ...]]:
    """Return how many words a sentence has, and each topic-bearing word's stem and spelling
    (its host), in order.

    Cached: a segment's summary is read again with every page filed into it (MTM's offline
    summary and its keywords were 14% of filing a page, py-spy, session 41). A text's words
    are its sentences' words: sentences are cut at whitespace, which no word holds, and
    folding goes character by character.
    """
    found = words(text)
    return len(found), tuple((stem(word), host(word)) for word in found if _is_content(word))


def _stem_weights(text: str) -> tuple[dict[str, int], dict[str, str]]:
    """Count content stems and pick each stem's display form.

    The display form is the stem's most frequent spelling in the text, then the shortest,
    then the first alphabetically, so the same text always shows the same word.
    """
    spellings: dict[str, dict[str, int]] = {}  # plain dicts: a Counter a stem cost 2% of MTM
    for sentence in sentences(text):
        for key, form in _analysed(sentence)[1]:
            forms = spellings.get(key)
            if forms is None:
                spellings[key] = {form: 1}
            else:
                forms[form] = forms.get(form, 0) + 1
    counts = {key: sum(forms.values()) for key, forms in spellings.items()}
    display = {
        key: min(forms, key=lambda form: (-forms[form], len(form), form))
        for key, forms in spellings.items()
    }
    return counts, display


def keywords(text: str, limit: int) -> list[str]:
    """Return up to `limit` keywords, most frequent stem first, ties in alphabetical order."""
    counts, display = _stem_weights(text)
    ranked = sorted(counts, key=lambda key: (-counts[key], display[key]))
    return [display[key] for key in ranked[:limit]]


def clip(text: str, max_chars: int) -> str:
    """Shorten text to at most `max_chars`, cutting at a word boundary and marking the cut."""
    if len(text) <= max_chars:
        return text
    head = text[: max_chars - len(_ELLIPSIS)]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:-") + _ELLIPSIS


def _density(length: int, content: Sequence[str], weights: Counter[str]) -> float:
    """Score a sentence by the text-wide frequency of its content stems, per sqrt of length."""
    # sqrt, not the length itself: a short sentence should not win on one keyword alone.
    return sum(weights[key] for key in content) / math.sqrt(length) if length else 0.0


def extractive_summary(parts: Sequence[str], max_chars: int) -> str:
    """Pick the opening sentence and the most keyword-dense others, in text order, bounded."""
    unique = list(dict.fromkeys(sentence for part in parts for sentence in sentences(part)))
    if not unique:
        return ""
    analysed = [_analysed(sentence) for sentence in unique]
    content = [[key for key, _ in terms] for _, terms in analysed]
    weights = Counter(key for keys in content for key in keys)
    scores = [
        _density(length, keys, weights) for (length, _), keys in zip(analysed, content, strict=True)
    ]
    # The opening sentence names the topic; the rest compete on density, earlier first on ties.
    ranked = sorted(range(1, len(unique)), key=lambda i: (-scores[i], i))
    chosen = [0]
    used = len(unique[0])
    for index in ranked:
        extra = len(unique[index]) + 1
        if used + extra <= max_chars:
            chosen.append(index)
            used += extra
    return clip(" ".join(unique[i] for i in sorted(chosen)), max_chars)
