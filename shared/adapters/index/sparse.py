"""Turn text into BM25 sparse vectors for the search index's keyword stream.

A text's terms are ``shared.domain.text.terms``: the words keyword matching and the offline
extractor see, stemmed, without stopwords.

Only the term-frequency half of BM25 is computed here; the IDF half is left to Qdrant. The
collection's sparse vector is configured with the IDF modifier, so at query time the engine
multiplies each matching weight by ``idf(t) = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))``,
counted over the points indexed at that moment. Computing IDF here would freeze it at write
time: each point would carry the statistics of the corpus as it was when it was written, older
points would drift out of step as the index grows, and a replay would need a first pass just to
count documents. With IDF in the engine, a text's vector depends on that text alone: a point
never needs rewriting, an index rebuild is one pass, and scores stay right at any size.

A query term weighs 1, so the engine's dot product of a query vector with a document vector is
exactly the BM25 score ``sum over query terms of idf(t) * tf_weight(t, d)``.
"""

import zlib
from collections import Counter
from dataclasses import dataclass

from memoryd.shared.domain.text import terms

__all__ = [
    "DEFAULT_AVG_LEN",
    "ENCODING_VERSION",
    "K1",
    "B",
    "SparseVector",
    "bm25_weight",
    "document_vector",
    "encoding",
    "query_vector",
    "term_index",
]

K1 = 1.2
B = 0.75
# Mean terms per indexed text, after stopword removal. On the bench data (../shared/bench) a
# LongMemEval-S turn averages 96 terms (user turns 23, a user+assistant page 192) and a LoCoMo
# turn 12: 100 sits at the turn mean. Callers that index mostly short facts should pass less.
DEFAULT_AVG_LEN = 100.0
# Raise it with any change to what ``document_vector`` returns for a text (its terms, their
# stemming or stopwords, the weights): the index's digests cover ``encoding``, not the
# vectors, so a replay rewrites every point's BM25 vector only when this says it changed.
# tests/unit/test_index_sparse.py pins the vectors of sample texts to this version.
ENCODING_VERSION = 1


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Sparse vector as parallel, index-sorted tuples of term indices and weights."""

    indices: tuple[int, ...]
    values: tuple[float, ...]

    def __bool__(self) -> bool:
        """Say whether the vector has any term at all."""
        return bool(self.indices)


def term_index(term: str) -> int:
    """Map a term to its sparse dimension: CRC-32 of its UTF-8 bytes, stable across runs."""
    # Python's hash() is salted per process, so it would scatter one term over many dimensions
    # between writers and readers; CRC-32 is fixed and fits Qdrant's uint32 sparse indices.
    return zlib.crc32(term.encode("utf-8"))


def bm25_weight(tf: int, doc_len: int, avg_len: float, k1: float = K1, b: float = B) -> float:
    """Return BM25's saturated term frequency, the document-side weight of one term."""
    return tf * (k1 + 1) / (tf + k1 * (1 - b + b * doc_len / avg_len))


def _term_counts(text: str) -> tuple[Counter[int], int]:
    """Count each term index of a text, and return the text's length in terms."""
    stems = terms(text)
    # Counting by index, not by stem, merges the rare CRC-32 collisions into one dimension,
    # because Qdrant rejects a sparse vector that repeats an index.
    return Counter(term_index(stem) for stem in stems), len(stems)


def encoding(avg_len: float = DEFAULT_AVG_LEN, k1: float = K1, b: float = B) -> str:
    """Name how ``document_vector`` encodes: a text's vector is a function of it and this."""
    return f"bm25/{ENCODING_VERSION} k1={k1!r} b={b!r} avg_len={avg_len!r}"


def document_vector(
    text: str, avg_len: float = DEFAULT_AVG_LEN, k1: float = K1, b: float = B
) -> SparseVector:
    """Encode a text to be indexed: each term weighted by BM25 term-frequency saturation."""
    if avg_len <= 0:
        raise ValueError(f"avg_len must be positive, got {avg_len}")
    counts, doc_len = _term_counts(text)
    indices = tuple(sorted(counts))
    values = tuple(bm25_weight(counts[index], doc_len, avg_len, k1, b) for index in indices)
    return SparseVector(indices, values)


def query_vector(text: str) -> SparseVector:
    """Encode a search query: each distinct term weighs 1."""
    indices = tuple(sorted(_term_counts(text)[0]))
    return SparseVector(indices, tuple(1.0 for _ in indices))
