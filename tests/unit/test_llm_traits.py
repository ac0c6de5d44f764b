"""Tests for the 90 user-trait dimensions in traits.toml."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import re
from collections import Counter

from memoryd.shared.adapters.llm.traits import load_traits


def test_ninety_unique_trait_ids() -> None:
    """The file holds 90 traits and no id repeats."""
    ids = [trait.id for trait in load_traits()]

    assert 90 == len(ids)
    assert 90 == len(set(ids))


def test_thirty_traits_per_group() -> None:
    """Each of the three MemoryOS groups has 30 dimensions."""
    groups = Counter(trait.group for trait in load_traits())

    assert {"basic_needs_and_personality": 30, "ai_alignment": 30, "content_interests": 30} == (
        groups
    )


def test_ids_are_snake_case_and_labels_unique() -> None:
    """Ids are snake_case (they are recorded in events) and labels tell traits apart."""
    traits = load_traits()

    assert [] == [t.id for t in traits if not re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*", t.id)]
    assert 90 == len({trait.label for trait in traits})


def test_every_trait_has_lowercase_cues() -> None:
    """The offline extractor can detect every trait: each has lowercase cue words."""
    traits = load_traits()

    assert [] == [t.id for t in traits if not t.cues or any(c != c.lower() for c in t.cues)]


def test_memoryos_dimensions_are_present() -> None:
    """The dimensions named by MemoryOS's own prompt are among the ids."""
    ids = {trait.id for trait in load_traits()}

    assert {"extraversion", "need_for_autonomy", "conciseness", "instruction_compliance"} <= ids
    assert {"travel_interest", "animal_concern", "sense_of_humor", "practicality"} <= ids
