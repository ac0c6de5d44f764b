"""Tests for the one word rule: words, stopwords, stems and terms."""

# STYLE.md puts the expected value first in asserts, which SIM300 calls a Yoda condition.
# These tests are about look-alike characters (full-width letters, curly apostrophes), each of
# which RUF001 would flag as ambiguous.
# ruff: noqa: RUF001

from __future__ import annotations

import threading
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from memoryd.shared.adapters.index.sparse import document_vector, query_vector
from memoryd.shared.adapters.llm._text import content_words, keywords, sentences
from memoryd.shared.domain.text import estimate_tokens, fold, host, is_stopword, stem, terms, words

# Text that exercises the rule's edges: letters of several scripts, digits, underscores,
# straight and curly apostrophes, case pairs that fold to something else ("ß", "İ", full-width
# forms), combining marks and punctuation.
_EDGY = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("aZ09_'’ʼ -.,!?@#\n\tßİıŞſﬁＡｚ\u0301\u0307éÉçñøΣσςжЖ中文ͺϒᴬǰΐ")),
        st.characters(codec="utf-8"),
    ),
    max_size=60,
)


def test_terms_are_lowercased_stemmed_and_free_of_stopwords() -> None:
    """A text becomes its lowercase stems, in order, without stopwords."""
    expected = ["runner", "run", "quick", "morn"]
    assert expected == terms("The Runner was RUNNING quickly this morning")


def test_punctuation_other_than_an_inner_apostrophe_separates_words() -> None:
    """Hyphens, dots and @ split words; a negation is one stopword, not two fragments."""
    expected = ["e", "mail", "bob", "exampl", "com", "2024"]
    assert expected == terms("Don't e-mail bob@example.com, 2024!")


def test_an_apostrophe_inside_a_word_keeps_it_whole() -> None:
    """Contractions, possessives and names with an apostrophe are one word each."""
    expected = ["don't", "alice's", "o'brien", "rock", "n'roll"]
    assert expected == words("Don't Alice's O'Brien 'rock n'roll'")


def test_a_curly_apostrophe_is_an_apostrophe() -> None:
    """Text typed with U+2019 or U+02BC gives the same words as with a straight apostrophe."""
    expected = words("Alice's dog doesn't bark")
    assert expected == words("Alice\u2019s dog doesn\u2019t bark")
    assert expected == words("Alice\u02bcs dog doesn\u02bct bark")


def test_underscores_digits_and_other_scripts_are_word_characters() -> None:
    """Identifiers, numbers and non-Latin words stay whole."""
    expected = ["user_id", "42", "3rd", "café", "жизнь", "東京"]
    assert expected == words("user_id=42, 3rd café; Жизнь 東京")


def test_folding_joins_case_and_compatibility_forms() -> None:
    """Case, full-width letters, ligatures and decomposed accents fold to one spelling."""
    assert fold("strasse") == fold("STRAẞE") == fold("Straße")
    assert fold("file") == fold("ﬁle") == fold("ＦＩＬＥ")
    assert fold("café") == fold("cafe\u0301")


def test_case_folding_never_cuts_a_word() -> None:
    """A letter that folds to a letter plus an accent ("ǰ", "ΐ") stays inside its word."""
    expected = ["ǰam", "ΐδιοσ", "ὐμνοσ"]  # a final sigma folds to the plain one
    assert expected == words("ǰam ΐδιος ὐμνος")


def test_a_possessive_matches_its_owner() -> None:
    """ "Alice's" and "Alice" share a term, and "news's" keeps the stem of "news"."""
    assert terms("Alice") == terms("Alice's")
    assert terms("news") == terms("news's")


def test_a_clitic_is_dropped_from_its_host() -> None:
    """ "'s", "'d", "'ll", "'m", "'re" and "'ve" leave the word they lean on."""
    expected = ["alice", "it", "could", "i", "you", "she"]
    assert expected == [host(w) for w in ("alice's", "it'll", "could've", "i'm", "you're", "she'd")]
    assert "don't" == host("don't")


def test_contractions_of_stopwords_are_stopwords() -> None:
    """A stopword with a clitic, and every negation of an auxiliary, say nothing."""
    for word in ("it's", "it'll", "i'm", "you've", "they're", "don't", "won't", "can't", "ain't"):
        assert is_stopword(word), word
    assert not is_stopword("alice's")


def test_words_that_are_only_negation_fragments_elsewhere_are_terms() -> None:
    """ "won", "don" and "haven" are words and names, not leftovers of "won't" or "don't"."""
    expected = ["won", "don", "found", "haven"]
    assert expected == terms("She won; Don found a haven")


def test_stems_are_shared_by_inflections() -> None:
    """Inflected forms of one word have one stem."""
    assert stem("running") == stem("runs") == stem("run")


def test_stemming_is_safe_across_threads() -> None:
    """Threads stemming at once get the same terms as one thread alone."""
    text = "Travelling photographers photographed the travellers' photographs " * 20
    expected = terms(text)
    results: list[list[str]] = []

    def run() -> None:
        results.extend(terms(text) for _ in range(50))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [expected] * 200 == results


@given(_EDGY)
def test_terms_are_stable_under_case_folding(text: str) -> None:
    """A text and its case-folded form have the same terms."""
    assert terms(text) == terms(text.casefold())


@given(_EDGY)
def test_folding_twice_changes_nothing(text: str) -> None:
    """Folded text is already folded."""
    assert fold(text) == fold(fold(text))


@given(_EDGY)
def test_terms_are_the_stems_of_the_words_not_stopwords(text: str) -> None:
    """Every term is the stem of one of the text's words, in order."""
    expected = [stem(word) for word in words(text) if not is_stopword(word)]
    assert expected == terms(text)


@given(_EDGY, _EDGY)
def test_whitespace_ends_a_word(first: str, second: str) -> None:
    """The terms of two texts joined by a space are the terms of each, in order."""
    assert terms(first) + terms(second) == terms(f"{first} {second}")


@given(_EDGY)
def test_a_query_matches_the_same_text_indexed(text: str) -> None:
    """Every term the BM25 query side makes of a text is a term its document side makes."""
    assert set(query_vector(text).indices) <= set(document_vector(text).indices)


@given(_EDGY)
def test_extracted_keywords_are_terms_of_their_text(text: str) -> None:
    """A keyword the offline extractor picks is indexed for the text it came from."""
    indexed = set(terms(text))
    assert all(set(terms(keyword)) <= indexed for keyword in keywords(text, 8))


@given(st.lists(_EDGY, max_size=6))
def test_a_texts_words_are_its_sentences_words(parts: list[str]) -> None:
    """Sentences are cut where no word runs on, so the extractor may read a text sentence by
    sentence (and remember each sentence's words: a summary's come back page after page)."""
    text = ". ".join(parts)
    assert words(text) == [word for sentence in sentences(text) for word in words(sentence)]


@given(st.lists(_EDGY, max_size=6))
def test_keywords_rank_stems_by_count_and_show_their_most_used_spelling(parts: list[str]) -> None:
    """The most frequent stems of the text's content words, ties by the word shown; each
    shown as its most frequent spelling, then the shortest, then the first in order."""
    text = "! ".join(parts)
    spellings: dict[str, Counter[str]] = {}
    for word in content_words(text):
        spellings.setdefault(stem(word), Counter())[host(word)] += 1
    shown = {
        key: min(forms, key=lambda form: (-forms[form], len(form), form))
        for key, forms in spellings.items()
    }
    ranked = sorted(spellings, key=lambda key: (-spellings[key].total(), shown[key]))

    assert [shown[key] for key in ranked[:5]] == keywords(text, 5)


def test_tokens_are_estimated_at_four_characters_each() -> None:
    """An empty text costs nothing, anything else at least one token."""
    assert (0, 1, 2) == (estimate_tokens(""), estimate_tokens("a"), estimate_tokens("abcdefgh"))
