"""Text helpers shared by matching and budgeting (pure)."""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

_WORD = re.compile(r"[\w']+", re.UNICODE)

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    i'm i've i'd i'll you're it's that's what's don't doesn't didn't""".split()
)


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def terms(text: str) -> list[str]:
    """Return the stemmed, stopword-free terms of ``text`` in order."""
    words = [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]
    return list(_stemmer().stemWords(words))


def estimate_tokens(text: str) -> int:
    """Estimate LLM tokens: about four characters a token for English text."""
    return max(1, (len(text) + 3) // 4) if text else 0
