"""Answer the LLM port deterministically, offline: no key, no network, no model.

Keywords are frequency-ranked stems, summaries are extractive, continuity is keyword overlap
plus discourse cues, and persona facts come from English first-person patterns. The same input
gives the same output on every machine, which is what the embedded default and tests need.
"""

import re
from collections.abc import Iterable, Iterator, Sequence

from memoryd.shared.adapters.llm._entities import NamedSpan, named_spans
from memoryd.shared.adapters.llm._patterns import Finding, agent_wishes, findings
from memoryd.shared.adapters.llm._text import (
    clip,
    content_words,
    extractive_summary,
    keywords,
    sentences,
    stems,
    word_set,
)
from memoryd.shared.adapters.llm.port import (
    Continuity,
    Entity,
    EntityType,
    Fact,
    GraphExtraction,
    PageText,
    PersonaExtraction,
    Relation,
    SegmentSummary,
)
from memoryd.shared.adapters.llm.traits import Trait, load_traits
from memoryd.shared.domain.text import words

__all__ = ["USER_ENTITY", "OfflineExtractor"]

USER_ENTITY = "user"

# A query that opens with one of these leans on the page before it ("And the price?").
_OPENING_CUES = word_set(
    """
    it it's its that that's this these those they them their he she his her him also and but
    so then same another more again ok okay thanks thank yes yeah yep no nope sure great cool
    """
)
_FOLLOW_UP = re.compile(
    r"\b(?:what about|how about|tell me more|you said|you mentioned|as well|go on|continue"
    r"|the same|instead|that one|the other one|follow[- ]up)\b",
    re.IGNORECASE,
)


def _opens_with_cue(query: str) -> bool:
    """Say whether a query reads as a follow-up: an opening pronoun or a follow-up phrase."""
    tokens = words(query)
    return bool(tokens) and (tokens[0] in _OPENING_CUES or bool(_FOLLOW_UP.search(query)))


def _continues(previous: PageText | None, page: PageText, threshold: float) -> bool:
    """Say whether a page continues the previous one.

    A page continues when its query reads as a follow-up, has no topic words of its own
    ("Why?"), or shares at least `threshold` of its topic stems with the previous page.
    """
    if previous is None:
        return False
    if _opens_with_cue(page.query):
        return True
    asked = set(stems(content_words(page.query)))
    if not asked:
        return True
    before = set(stems(content_words(f"{previous.query}\n{previous.response}")))
    return len(asked & before) / len(asked) >= threshold


def _page_parts(pages: Sequence[PageText]) -> list[str]:
    """List a run of pages' texts in dialogue order."""
    return [text for page in pages for text in (page.query, page.response)]


_CueIndex = dict[str, tuple[tuple[str, tuple[str, ...]], ...]]


def _cue_index(traits: Iterable[Trait]) -> _CueIndex:
    """Index every trait cue, stemmed, by its first stem, so a sentence is scanned once."""
    index: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for trait in traits:
        for cue in trait.cues:
            cue_stems = stems(words(cue))
            if cue_stems:
                index.setdefault(cue_stems[0], []).append((trait.id, cue_stems))
    return {first: tuple(entries) for first, entries in index.items()}


def _traits_cued(stemmed: tuple[str, ...], index: _CueIndex) -> Iterator[str]:
    """Yield the id of each trait whose cue occurs in a stemmed sentence, in reading order."""
    for position, token in enumerate(stemmed):
        for trait_id, cue in index.get(token, ()):
            if stemmed[position : position + len(cue)] == cue:
                yield trait_id


def _profile(found: Iterable[Finding]) -> dict[str, str]:
    """Fold profile findings in order, so that what was said last wins."""
    profile: dict[str, str] = {}
    for finding in found:
        if finding.in_profile:
            profile[finding.attribute] = finding.value
    return profile


def _facts(found: Iterable[Finding]) -> tuple[Fact, ...]:
    """Turn findings into facts, each once, in the order they were said."""
    facts = (Fact(attribute=f.attribute, value=f.value, text=f.text) for f in found)
    return tuple(dict.fromkeys(facts))


def _graph_from(spans: Sequence[NamedSpan], found: Sequence[Finding]) -> GraphExtraction:
    """Build the graph: named spans as entities, and the user's facts as edges from the user.

    A fact's value type overrides the type guessed from capitalisation ("a dog named Rex" is
    not a person); relation endpoints always appear among the entities.
    """
    edges = [finding for finding in found if finding.relation is not None]
    names: dict[str, str] = {}
    types: dict[str, EntityType] = {}
    if edges:
        names[USER_ENTITY] = USER_ENTITY
        types[USER_ENTITY] = "person"
    for span in spans:
        names.setdefault(span.name.casefold(), span.name)
        types.setdefault(span.name.casefold(), span.type)
    for finding in edges:
        names.setdefault(finding.value.casefold(), finding.value)
        types[finding.value.casefold()] = finding.value_type
    relations = (
        Relation(source=USER_ENTITY, relation=str(f.relation), target=names[f.value.casefold()])
        for f in edges
    )
    return GraphExtraction(
        entities=tuple(Entity(name=names[key], type=types[key]) for key in names),
        relations=tuple(dict.fromkeys(relations)),
    )


class OfflineExtractor:
    """The MemoryLlm port answered by rules: deterministic, offline, free."""

    def __init__(
        self,
        *,
        max_keywords: int = 8,
        chain_summary_chars: int = 300,
        segment_summary_chars: int = 400,
        continuity_threshold: float = 0.3,
        evidence_chars: int = 160,
    ) -> None:
        """Configure the bounds; the defaults suit MemoryOS's short pages and summaries."""
        self._max_keywords = max_keywords
        self._chain_chars = chain_summary_chars
        self._segment_chars = segment_summary_chars
        self._threshold = continuity_threshold
        self._evidence_chars = evidence_chars
        self._cues = _cue_index(load_traits())

    @property
    def name(self) -> str:
        """Name this extractor in the events it decides; bump the version when rules change."""
        return "offline-v1"

    async def check_continuity(self, previous: PageText | None, page: PageText) -> Continuity:
        """Say whether a page continues the previous one, by cues and keyword overlap."""
        return Continuity(linked=_continues(previous, page, self._threshold))

    async def summarise_chain(self, pages: Sequence[PageText]) -> str:
        """Summarise linked pages by their opening and most keyword-dense sentences."""
        return extractive_summary(_page_parts(pages), self._chain_chars)

    async def page_keywords(self, page: PageText) -> list[str]:
        """Return a page's most frequent topic words, ties in alphabetical order."""
        return keywords(f"{page.query}\n{page.response}", self._max_keywords)

    async def summarise_segment(
        self, previous_summary: str, pages: Sequence[PageText]
    ) -> SegmentSummary:
        """Rewrite a segment summary from the old summary and the new pages, bounded."""
        parts = [previous_summary, *_page_parts(pages)]
        return SegmentSummary(
            summary=extractive_summary(parts, self._segment_chars),
            keywords=tuple(keywords("\n".join(parts), self._max_keywords)),
        )

    async def extract_persona(self, pages: Sequence[PageText]) -> PersonaExtraction:
        """Extract what the user says about themselves; the agent's words are not evidence."""
        said = [page.query for page in pages]
        found = [finding for query in said for finding in findings(query)]
        return PersonaExtraction(
            profile=_profile(found),
            facts=_facts(found),
            traits=self._trait_evidence(said),
            agent_traits=tuple(dict.fromkeys(w for query in said for w in agent_wishes(query))),
        )

    async def extract_graph(self, text: str) -> GraphExtraction:
        """Extract capitalised names as entities and first-person facts as relations."""
        return _graph_from(named_spans(text), findings(text))

    async def aclose(self) -> None:
        """Hold no resources, so release nothing."""

    def _trait_evidence(self, said: Sequence[str]) -> dict[str, str]:
        """Map each trait whose cue the user said to the first sentence that said it."""
        evidence: dict[str, str] = {}
        for sentence in (s for text in said for s in sentences(text)):
            for trait_id in _traits_cued(stems(words(sentence)), self._cues):
                evidence.setdefault(trait_id, clip(sentence, self._evidence_chars))
        return evidence
