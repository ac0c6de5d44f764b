"""Tests for the LLM prompts."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

from memoryd.shared.adapters.llm import prompts
from memoryd.shared.adapters.llm.port import PageText
from memoryd.shared.adapters.llm.traits import load_traits

PAGE = PageText(query="I moved to Lisbon.", response="Welcome to Lisbon!")
LATER = PageText(query="Any good beaches?", response="Try Carcavelos.")


def test_persona_prompt_offers_every_trait_id() -> None:
    """The model is shown all 90 trait ids, so it can report any of them."""
    prompt = prompts.persona([PAGE], load_traits())

    assert [] == [trait.id for trait in load_traits() if f"\n{trait.id}:" not in prompt.user]


def test_continuity_prompt_shows_both_pages_in_order() -> None:
    """The continuity question shows the previous page before the current one."""
    prompt = prompts.continuity(PAGE, LATER)

    assert prompt.user.index("I moved to Lisbon.") < prompt.user.index("Any good beaches?")


def test_every_prompt_asks_for_json_only() -> None:
    """Each step's system message asks for one JSON object and nothing else."""
    every = [
        prompts.continuity(PAGE, LATER),
        prompts.chain_summary([PAGE, LATER]),
        prompts.page_keywords(PAGE, 8),
        prompts.segment_summary("", [PAGE], 8),
        prompts.persona([PAGE], load_traits()),
        prompts.graph("I moved to Lisbon."),
    ]

    assert all("one JSON object" in prompt.system for prompt in every)


def test_segment_prompt_marks_a_missing_summary() -> None:
    """A first segment summary says there is none rather than leaving a blank."""
    prompt = prompts.segment_summary("", [PAGE], 8)

    assert "Previous summary: (none)" in prompt.user
