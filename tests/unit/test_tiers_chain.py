"""Unit tests for the STM meta chain's pure parts."""

from __future__ import annotations

from typing import Any

from memoryd.services.stm.chain import chain_pages


def rows(*linked: bool) -> list[dict[str, Any]]:
    """Return chain rows numbered from 0 with the given continuity verdicts."""
    return [
        {"query": f"q{i}", "response": f"r{i}", "linked": flag} for i, flag in enumerate(linked)
    ]


def test_a_linked_page_chains_back_to_the_last_reset() -> None:
    """The chain runs from the last page that was not linked to the new page."""
    pages = chain_pages(rows(False, False, True, True, False), linked=True)

    assert ["q1", "q2", "q3", "q4"] == [page.query for page in pages]


def test_an_unlinked_page_starts_its_own_chain() -> None:
    """A page that does not continue the previous one is a chain of one."""
    pages = chain_pages(rows(False, True, False), linked=False)

    assert ["q2"] == [page.query for page in pages]
