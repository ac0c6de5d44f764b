"""Tests for the BM25 sparse encoder of the search index."""

import hashlib

import pytest

from memoryd.shared.adapters.index.sparse import (
    ENCODING_VERSION,
    SparseVector,
    bm25_weight,
    document_vector,
    encoding,
    query_vector,
    term_index,
)

# What document_vector returns for SAMPLES, by ENCODING_VERSION (a SHA-256 of their reprs).
PINNED = {1: "afb95010b0980937253e5c863a4898c4294c47436d2be962f913e9ed7455ad07"}
SAMPLES = (
    "Running runners ran; the RUN was run by the running man!",
    "I'd like café au lait, not 2 espressos at 7:30am.",
    "cat cat dog cat bird dog",
    "Caroline's LGBTQ support group met on 8 May 2023 in Boston",
    "",
)


def _weight(vector: SparseVector, term: str) -> float:
    """Return the weight the vector gives to a (stemmed) term."""
    return dict(zip(vector.indices, vector.values, strict=True))[term_index(term)]


def test_inflections_share_one_dimension() -> None:
    """Different forms of one word map to the same sparse index, so they match each other."""
    assert query_vector("running").indices == query_vector("runs").indices


def test_term_index_is_pinned_across_processes() -> None:
    """A term always maps to the same uint32 index in every process (CRC-32, not hash())."""
    crc32_of_run = 1349952704
    assert crc32_of_run == term_index("run")


def test_term_index_fits_uint32() -> None:
    """Every index is a valid Qdrant sparse index (0 <= i < 2**32)."""
    indices = document_vector("a fairly ordinary sentence about zebras and quantum physics").indices
    assert all(0 <= index < 2**32 for index in indices)


def test_document_weight_is_one_for_single_term_at_average_length() -> None:
    """With tf=1 in a document of average length, BM25's saturated tf is exactly 1."""
    expected = pytest.approx((1.0,))
    assert expected == document_vector("zebra", avg_len=1.0).values


def test_repeated_term_saturates() -> None:
    """A term said twice weighs more than once, but less than double."""
    once = bm25_weight(tf=1, doc_len=10, avg_len=10.0)
    twice = bm25_weight(tf=2, doc_len=10, avg_len=10.0)
    assert once < twice < 2 * once


def test_longer_documents_weigh_a_term_less() -> None:
    """The same term frequency counts for less in a longer document."""
    short = document_vector("zebra stripes", avg_len=4.0)
    long = document_vector("zebra stripes grass savanna heat water lions", avg_len=4.0)
    assert _weight(long, "zebra") < _weight(short, "zebra")


def test_document_vector_has_sorted_unique_indices() -> None:
    """Repeated terms collapse into one index each, and indices come sorted."""
    vector = document_vector("cat cat dog cat bird dog")
    expected = sorted({term_index("cat"), term_index("dog"), term_index("bird")})
    assert expected == list(vector.indices)


def test_query_terms_weigh_one_each() -> None:
    """A query term weighs 1 however often it is repeated."""
    expected = (1.0, 1.0)
    assert expected == query_vector("coffee coffee coffee beans").values


def test_stopword_only_text_is_empty() -> None:
    """A text of stopwords has no terms, and its vector is falsy."""
    assert not query_vector("what is it that you were doing")


def test_average_length_must_be_positive() -> None:
    """A zero average length is refused instead of dividing by zero."""
    with pytest.raises(ValueError, match="avg_len"):
        document_vector("zebra", avg_len=0.0)


def test_the_encoding_version_names_what_document_vector_returns() -> None:
    """The index's digests name the encoding, not its vectors: a change to the vectors
    without a new ENCODING_VERSION would leave a replay's BM25 vectors stale."""
    digest = hashlib.sha256()
    for text in SAMPLES:
        vector = document_vector(text)
        digest.update(repr((vector.indices, vector.values)).encode())
    assert PINNED.get(ENCODING_VERSION) == digest.hexdigest(), (
        "document_vector's output changed: raise sparse.ENCODING_VERSION and pin the new "
        "digest in PINNED, so that a replay rewrites every point's BM25 vector"
    )


def test_the_encoding_names_its_parameters() -> None:
    """Another length norm or saturation is another encoding; the same ones, the same."""
    assert encoding(100.0) == encoding(100.0)
    assert len({encoding(100.0), encoding(10.0), encoding(100.0, k1=1.5), encoding(b=0.5)}) == 4
