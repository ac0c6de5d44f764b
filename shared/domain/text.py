"""The one word rule of memoryd, and the token estimate of budgeting (pure).

Every piece that compares words goes through here: the BM25 index (what a point is indexed
under and what a query matches), keyword matching of explicit memories, the graph's relation
names and the offline extractor's keywords and summaries. They agree on what a word is:

- ``fold``: Unicode NFKC with case folding (so "Straße", "STRASSE" and the full-width forms
  are one spelling), and typographic apostrophes written as ``'``.
- ``words``: runs of letters, digits and underscores (any script), joined by apostrophes inside
  a word: "don't", "alice's", "o'brien", "user_id" and "2024" are one word each; an apostrophe
  at either end is a quote mark, not part of the word.
- ``host``: a word without its clitic ('s, 'd, 'll, 'm, 're, 've): "alice's" is about Alice,
  "it'll" is "it". The negations ("don't") stay whole: their hosts are not words.
- ``is_stopword``: the host is in ``STOPWORDS``.
- ``stem``: the Snowball English stem of the host.
- ``terms``: the stems of a text's words that are not stopwords, in order, repeats kept.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import lru_cache

import Stemmer  # ships no type hints: see [[tool.mypy.overrides]]

__all__ = [
    "STOPWORDS",
    "estimate_tokens",
    "fold",
    "host",
    "is_stopword",
    "stem",
    "terms",
    "words",
]

_WORD = re.compile(r"\w+(?:'\w+)*")
# U+2019 (right single quotation mark) is how most keyboards and chat apps type an apostrophe;
# U+02BC (modifier letter apostrophe) counts as a letter, so it would glue "don" and "t".
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u02bc": "'"})
_CLITICS = ("'s", "'d", "'ll", "'m", "'re", "'ve")

# NLTK's English list: its words, its negations whole ("don't"), and the one-letter and clitic
# fragments ("t-shirt", "U.S.", "h&m" leave a lone "t", "s", "m": they name nothing). NLTK's
# other fragments ("don", "won", "haven", "ma") are left out: a whole-word rule never cuts a
# negation into them, and standing alone they are words and names. The forms with a clitic
# ("it's", "you'd") need no entry: ``is_stopword`` looks at their host.
# Kept as one split string (SIM905 off): 180 quoted one-per-line words would hide the list.
STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can did do does doing down during each few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves
    out over own same she should so some such than that the their theirs them themselves then
    there these they this those through to too under until up very was we were what when where
    which while who whom why will with you your yours yourself yourselves
    ain't aren't can't couldn't didn't doesn't don't hadn't hasn't haven't isn't mightn't
    mustn't needn't shan't shouldn't wasn't weren't won't wouldn't
    d ll m o re s t ve y
    """.split()  # noqa: SIM905
)

# A PyStemmer instance keeps internal state and must not be shared between threads, and the
# adapters may run this code in worker threads: one stemmer per thread.
_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    """Return this thread's English stemmer, creating it on first use."""
    stemmer: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english")
        _local.stemmer = stemmer
    return stemmer


def fold(text: str) -> str:
    """Return the text as words are compared: NFKC, case folded, apostrophes as ``'``."""
    if text.isascii():
        # Most text is ASCII, where NFKC changes nothing and case folding is lowercasing.
        return text.lower()
    # Folding can leave text that is no longer NFKC: "ǰ" and "ΐ" fold to a letter and a
    # combining accent, which is no word character and would cut the word; NFKC recomposes.
    folded = unicodedata.normalize("NFKC", text).casefold()
    return unicodedata.normalize("NFKC", folded).translate(_APOSTROPHES)


def words(text: str) -> list[str]:
    """Return the folded words of a text, in order, stopwords and repeats kept."""
    return _WORD.findall(fold(text))


def host(word: str) -> str:
    """Return a folded word without its clitic: "alice's" -> "alice", "could've" -> "could"."""
    if "'" in word:
        for clitic in _CLITICS:
            if word.endswith(clitic) and len(word) > len(clitic):
                return word[: -len(clitic)]
    return word


def is_stopword(word: str) -> bool:
    """Say whether a folded word says nothing about a topic: its host is a stopword."""
    return word in STOPWORDS or host(word) in STOPWORDS


# Chat reuses a small vocabulary: caching stems saves most of the stemmer calls.
@lru_cache(maxsize=1 << 16)
def stem(word: str) -> str:
    """Return the English stem of a folded word's host."""
    # The host, not the word: Snowball drops a possessive itself but then stems "news's" to
    # "new" (its exceptions list holds "news", not "news's").
    result: str = _stemmer().stemWord(host(word))
    return result


@lru_cache(maxsize=1 << 16)
def _term(word: str) -> str:
    """Return the term of a folded word, or "" for a stopword (one cache look-up a word)."""
    return "" if is_stopword(word) else stem(word)


def terms(text: str) -> list[str]:
    """Return the stemmed, stopword-free terms of a text, in order, repeats kept."""
    return [term for term in map(_term, words(text)) if term]


def estimate_tokens(text: str) -> int:
    """Estimate LLM tokens: about four characters a token for English text."""
    return max(1, (len(text) + 3) // 4) if text else 0
