"""Split, tokenise, stem and rank English text for the offline extractor."""

import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache

# PyStemmer ships no type stubs; `unused-ignore` keeps this line quiet once the project adds an
# ignore_missing_imports override for it.
import Stemmer  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "STOPWORDS",
    "clip",
    "content_words",
    "extractive_summary",
    "keywords",
    "sentences",
    "stem",
    "stems",
    "word_set",
    "words",
]


def word_set(text: str) -> frozenset[str]:
    """Return the whitespace-separated words of a word list written as prose."""
    return frozenset(text.split())


# NLTK's English list, its apostrophe forms kept whole (the tokeniser keeps "don't" as one
# word), plus chat filler that says nothing about a topic.
STOPWORDS = word_set(
    """
    a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each few for from further had hadn't has hasn't have haven't having
    he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm
    i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor not
    of off on once only or other ought our ours ourselves out over own same shan't she she'd
    she'll she's should shouldn't so some such than that that's the their theirs them
    themselves then there there's these they they'd they'll they're they've this those through
    to too under until up very was wasn't we we'd we'll we're we've were weren't what what's
    when when's where where's which while who who's whom why why's will with won't would
    wouldn't you you'd you'll you're you've your yours yourself yourselves
    also actually just really like well yes yeah yep no nope okay ok oh hi hello hey thanks
    thank please sure maybe much many lot lots thing things something anything everything
    nothing get got getting make made go going gone want wanted know think thought say said
    tell told let one would could might may must shall need see look way kind sort bit even
    still already now today though since however
    """
)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
_MIN_KEYWORD_LENGTH = 3
_ELLIPSIS = "…"
# A PyStemmer instance keeps internal state and must not be shared between threads.
_local = threading.local()


def _stemmer() -> "Stemmer.Stemmer":
    """Return this thread's English stemmer, creating it on first use."""
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english")
        _local.stemmer = stemmer
    return stemmer


def sentences(text: str) -> list[str]:
    """Split text into trimmed, non-empty sentences."""
    return [part.strip() for part in _SENTENCE_END.split(text) if part.strip()]


def words(text: str) -> list[str]:
    """Return the lowercase words of a text, apostrophes inside words kept."""
    return _WORD.findall(text.lower().replace("\u2019", "'"))


# Chat reuses a small vocabulary: caching stems saves most of the stemmer calls.
@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """Return the English stem of one lowercase word, its possessive dropped."""
    base = word[:-2] if word.endswith("'s") else word
    result: str = _stemmer().stemWord(base)
    return result


def stems(tokens: Iterable[str]) -> tuple[str, ...]:
    """Stem each word, in order."""
    return tuple(stem(token) for token in tokens)


def _is_content(word: str) -> bool:
    """Say whether a word can carry a topic: not a stopword, long enough, not just digits."""
    # Words are runs of letters and digits, so "has a letter" is "is not all digits".
    return len(word) >= _MIN_KEYWORD_LENGTH and word not in STOPWORDS and not word.isdigit()


def content_words(text: str) -> list[str]:
    """Return the topic-bearing words of a text, in order, repeats kept."""
    return [word for word in words(text) if _is_content(word)]


def _stem_weights(text: str) -> tuple[Counter[str], dict[str, str]]:
    """Count content stems and pick each stem's display form.

    The display form is the stem's most frequent spelling in the text, then the shortest,
    then the first alphabetically, so the same text always shows the same word.
    """
    spellings: dict[str, Counter[str]] = {}
    for word in content_words(text):
        key = stem(word)
        forms = spellings.get(key)
        if forms is None:
            forms = spellings[key] = Counter()
        forms[word.removesuffix("'s")] += 1
    counts = Counter({key: forms.total() for key, forms in spellings.items()})
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
    tokens = [words(sentence) for sentence in unique]
    content = [[stem(word) for word in found if _is_content(word)] for found in tokens]
    weights = Counter(key for keys in content for key in keys)
    scores = [
        _density(len(found), keys, weights) for found, keys in zip(tokens, content, strict=True)
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
