"""Unit tests of graph search's pure parts: entity matching and the depth-2 walk."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.shared.domain.graph import (
    Edge,
    EntityNames,
    matched_entities,
    name_key,
    names_word,
    walk,
    without_names,
)
from memoryd.shared.domain.text import terms

LISBON, ANNA, GOOGLE = (uuid.UUID(int=n) for n in (1, 2, 3))
EDGES = [
    Edge("user", "lives_in", "lisbon", LISBON),
    Edge("user", "has_sister", "anna", ANNA),
    Edge("anna", "works_at", "google", GOOGLE),
]


def test_names_match_as_whole_words_and_first_person_matches_the_user() -> None:
    """'Anna' matches, 'Annabel' does not; 'my' brings in the user node."""
    names = ["anna", "google", "user"]
    assert {"anna"} == matched_entities("What does Anna like?", names)
    assert set() == matched_entities("What does Annabel like?", names)
    assert {"google", "user"} == matched_entities("Do I know anyone at Google?", names)


_PIECES = st.text(alphabet="ab _-'.é1", max_size=12)


@given(key=_PIECES.filter(bool), text=_PIECES)
def test_whole_word_match_agrees_with_the_regular_expression(key: str, text: str) -> None:
    """The fast scan finds a name exactly where ``(?<!\\w)name(?!\\w)`` would."""
    expected = re.search(rf"(?<!\w){re.escape(key)}(?!\w)", text) is not None
    assert names_word(key, text) == expected


def test_the_walk_reaches_two_hops_and_prefers_named_relations() -> None:
    """From Google: the work edge (hop 1) outranks the sister edge (hop 2); Lisbon is off."""
    scores = walk({"google"}, EDGES, set(terms("who is at google")))
    assert scores[GOOGLE] > scores[ANNA] > 0
    assert LISBON not in scores


def test_the_user_node_walks_only_the_relations_the_query_names() -> None:
    """'Where do I live?' follows lives_in from the user, not every edge the user has."""
    scores = walk({"user"}, EDGES, set(terms("Where do I live?")))
    assert [LISBON] == list(scores)


def test_entity_keys_fold_case_and_spacing() -> None:
    """Two spellings of one name are one node."""
    assert name_key("New  York") == name_key("new york")


KEYS = [
    "anna",
    "anna maria",
    "maria",
    "o'brien",
    "st. louis",
    "c++",
    "rock_band",
    "zoë",
    "nyc 2024",
    "2024",
    "!!!",
    "-x-",
    "new york",
    "york",
]
QUERIES = [
    "Did Anna Maria meet O'Brien in St. Louis?",
    "annabel and maria",
    "I code in C++ and c# with the rock_band",
    "Zoë went to NYC 2024!!!",
    "what about -x- and !!!?",
    "New  York or new york",
    "mariana, york-shire",
    "",
]


@pytest.mark.parametrize("query", QUERIES)
def test_the_name_index_matches_exactly_what_checking_every_name_matches(query: str) -> None:
    """Filing names under their first word finds the same names as testing each one."""
    folded = query.casefold()
    every = {key for key in KEYS if names_word(key, folded)}

    assert every == EntityNames.of(KEYS).named_in(folded)


@given(st.lists(_PIECES.map(str.casefold), max_size=8), _PIECES)
def test_the_name_index_agrees_with_checking_every_name_on_any_text(
    keys: list[str], query: str
) -> None:
    """For any names and text, the index finds exactly the names a full scan finds."""
    folded = query.casefold()
    every = {key for key in keys if key != "user" and names_word(key, folded)}

    assert every == EntityNames.of(keys).named_in(folded)


def test_a_query_naming_no_hub_comes_back_as_written() -> None:
    """Recall's dense stream and its tiers then ask the query cache for one text, not two."""
    pasted = "Monthly distribution\nBerkshire County\n  Location   Address"
    assert without_names(pasted, ["Anna", "Caroline"]) == pasted


def test_hub_names_and_their_possessive_leave_the_query() -> None:
    query = "Did Caroline's  sister\nAnna visit caroline?"
    assert without_names(query, ["Caroline", "Anna"]) == "Did sister visit ?"
