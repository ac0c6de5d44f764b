"""Prompts for each LLM step; each asks for one JSON object of a fixed shape.

Adapted from the MemoryOS prompts (Kang et al. 2025), rewritten to answer in JSON so the
answer can be validated before it is recorded as an event.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from memoryd.shared.adapters.llm.port import PageText
from memoryd.shared.adapters.llm.traits import Trait

__all__ = [
    "Prompt",
    "chain_summary",
    "continuity",
    "graph",
    "page_keywords",
    "persona",
    "segment_summary",
]

_JSON_ONLY = "Answer with one JSON object and nothing else: no prose, no code fence."


@dataclass(frozen=True, slots=True)
class Prompt:
    """A system and a user message for one chat completion."""

    system: str
    user: str


def _dialogue(pages: Sequence[PageText]) -> str:
    """Render pages as a User/Assistant transcript."""
    return "\n".join(f"User: {page.query}\nAssistant: {page.response}" for page in pages)


def continuity(previous: PageText, page: PageText) -> Prompt:
    """Ask whether a page continues the previous page's topic."""
    return Prompt(
        system=f"You detect whether a conversation continues its topic. {_JSON_ONLY}",
        user=(
            "Does the current page continue the previous page, without a change of topic?\n"
            'Answer {"linked": true} or {"linked": false}.\n\n'
            f"Previous page:\n{_dialogue([previous])}\n\nCurrent page:\n{_dialogue([page])}"
        ),
    )


def chain_summary(pages: Sequence[PageText]) -> Prompt:
    """Ask for the one- or two-sentence meta-summary of a chain of linked pages."""
    return Prompt(
        system=f"You summarise conversations in one or two short sentences. {_JSON_ONLY}",
        user=(
            "Summarise the topic and the key information of this conversation in at most two "
            'sentences. Answer {"summary": "..."}.\n\n'
            f"Conversation:\n{_dialogue(pages)}"
        ),
    )


def page_keywords(page: PageText, limit: int) -> Prompt:
    """Ask for a page's topic keywords."""
    return Prompt(
        system=f"You extract topic keywords from dialogue. {_JSON_ONLY}",
        user=(
            f"List at most {limit} lowercase keywords (single words or short noun phrases) that "
            "name the topics of this exchange, most important first. "
            'Answer {"keywords": ["...", "..."]}.\n\n'
            f"Exchange:\n{_dialogue([page])}"
        ),
    )


def segment_summary(previous_summary: str, pages: Sequence[PageText], limit: int) -> Prompt:
    """Ask to rewrite a topic segment's summary and keywords with new pages."""
    return Prompt(
        system=f"You maintain short topic summaries of conversations. {_JSON_ONLY}",
        user=(
            "Rewrite the segment summary so it covers the previous summary and the new "
            "dialogue, in at most three short sentences, and list at most "
            f"{limit} lowercase topic keywords, most important first. "
            'Answer {"summary": "...", "keywords": ["...", "..."]}.\n\n'
            f"Previous summary: {previous_summary or '(none)'}\n\n"
            f"New dialogue:\n{_dialogue(pages)}"
        ),
    )


def _trait_lines(traits: Sequence[Trait]) -> str:
    """List trait dimensions as `id: label - description` lines."""
    return "\n".join(f"{t.id}: {t.label} - {t.description}" for t in traits)


def persona(pages: Sequence[PageText], traits: Sequence[Trait]) -> Prompt:
    """Ask for the user's profile, facts, trait evidence and wishes for the assistant."""
    return Prompt(
        system=(
            "You extract what a user reveals about themselves in a conversation. Use only what "
            f"the user states or clearly implies; never guess. {_JSON_ONLY}"
        ),
        user=(
            "From the conversation, extract:\n"
            '- "profile": static attributes of the user as snake_case key -> short value '
            "(name, location, hometown, occupation, employer, age, birthday, spouse, ...);\n"
            '- "facts": facts about the user, each {"attribute": snake_case, "value": short '
            'value, "text": one sentence starting "The user"};\n'
            '- "traits": for the dimensions below that the conversation shows, dimension id -> '
            "level (high, medium or low) and a few words of evidence;\n"
            '- "agent_traits": standing instructions the user gives the assistant about how '
            'to behave, as short imperative phrases (e.g. "answer concisely").\n'
            "Leave out anything not shown. Answer "
            '{"profile": {}, "facts": [], "traits": {}, "agent_traits": []}.\n\n'
            f"Trait dimensions:\n{_trait_lines(traits)}\n\n"
            f"Conversation:\n{_dialogue(pages)}"
        ),
    )


def graph(text: str) -> Prompt:
    """Ask for the entities and relations of a text for a knowledge graph."""
    return Prompt(
        system=f"You extract a knowledge graph from text. {_JSON_ONLY}",
        user=(
            "List the named entities in the text, each with a type among person, place, org "
            "and thing, and the relations between them as snake_case verbs "
            '(e.g. lives_in, works_at, likes). Call the speaker "user". Answer '
            '{"entities": [{"name": "...", "type": "person"}], '
            '"relations": [{"source": "...", "relation": "...", "target": "..."}]}.\n\n'
            f"Text:\n{text}"
        ),
    )
