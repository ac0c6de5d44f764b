"""Tests for the deterministic offline extractor."""
# The project style puts the expected value first; ruff's SIM300 forbids it.

import pytest

from memoryd.shared.adapters.llm.offline import OfflineExtractor
from memoryd.shared.adapters.llm.port import (
    Entity,
    Fact,
    MemoryLlm,
    PageText,
    PersonaExtraction,
    Relation,
)
from memoryd.shared.adapters.llm.traits import load_traits


def said(*queries: str) -> list[PageText]:
    """Make pages where the user says each query and the agent answers blandly."""
    return [PageText(query=query, response="Noted.") for query in queries]


async def persona_of(*queries: str) -> PersonaExtraction:
    """Extract the persona of a user who said the queries."""
    return await OfflineExtractor().extract_persona(said(*queries))


@pytest.mark.parametrize(
    ("query", "attribute", "value"),
    [
        ("I live in Porto.", "location", "Porto"),
        ("I moved to Lisbon last month.", "location", "Lisbon"),
        ("I've just relocated to New York City with my family.", "location", "New York City"),
        ("I'm from São Paulo, Brazil.", "hometown", "São Paulo"),
        ("Hi, my name is Ana Silva and I need help.", "name", "Ana Silva"),
        ("I am a nurse at the local hospital.", "occupation", "nurse"),
        ("I work as a software engineer in Berlin.", "occupation", "software engineer"),
        ("I work at Acme Corp as a designer.", "employer", "Acme Corp"),
        ("My favourite book is Dune.", "favourite_book", "Dune"),
        ("My favorite TV show is The Wire.", "favourite_tv_show", "The Wire"),
        ("I'm 34 years old.", "age", "34"),
        ("My birthday is March 3rd.", "birthday", "March 3rd"),
        ("My wife is Maria.", "spouse", "Maria"),
        ("My husband's name is John.", "spouse", "John"),
        ("My partner Sam cooks every night.", "partner", "Sam"),
    ],
)
async def test_profile_pattern(query: str, attribute: str, value: str) -> None:
    """Each first-person statement sets its profile attribute."""
    persona = await persona_of(query)

    assert value == persona.profile.get(attribute)


@pytest.mark.parametrize(
    ("query", "fact"),
    [
        ("I like jazz.", Fact(attribute="likes", value="jazz", text="The user likes jazz.")),
        (
            "I love to cook Italian food.",
            Fact(
                attribute="likes",
                value="cook Italian food",
                text="The user likes to cook Italian food.",
            ),
        ),
        (
            "I really enjoy hiking with my dog.",
            Fact(attribute="likes", value="hiking", text="The user likes hiking."),
        ),
        (
            "I hate mushrooms.",
            Fact(attribute="dislikes", value="mushrooms", text="The user dislikes mushrooms."),
        ),
        (
            "I dislike loud music.",
            Fact(attribute="dislikes", value="loud music", text="The user dislikes loud music."),
        ),
        (
            "I have a dog named Rex.",
            Fact(attribute="pet", value="Rex", text="The user has a dog named Rex."),
        ),
        (
            "I've got a cat called Luna.",
            Fact(attribute="pet", value="Luna", text="The user has a cat named Luna."),
        ),
        (
            "I have a cactus named Spike.",
            Fact(attribute="cactus", value="Spike", text="The user has a cactus named Spike."),
        ),
        (
            "My son is named Leo.",
            Fact(attribute="child", value="Leo", text="The user's son is named Leo."),
        ),
        (
            "My daughter Ines starts school soon.",
            Fact(attribute="child", value="Ines", text="The user's daughter is named Ines."),
        ),
        (
            "I moved to Lisbon last month.",
            Fact(attribute="location", value="Lisbon", text="The user moved to Lisbon."),
        ),
    ],
)
async def test_fact_pattern(query: str, fact: Fact) -> None:
    """Each first-person statement becomes a fact with a readable sentence."""
    persona = await persona_of(query)

    assert (fact,) == persona.facts


async def test_two_named_children_make_two_facts() -> None:
    """A list of names yields one fact per child."""
    persona = await persona_of("I have two kids named Tom and Lucy.")

    assert ["Tom", "Lucy"] == [fact.value for fact in persona.facts]


@pytest.mark.parametrize(
    "query",
    [
        "I'm a big fan of jazz.",
        "I am a vegetarian.",
        "Call me tomorrow.",
        "I love it!",
        "My wife is a doctor.",
        "I'm 5 minutes away.",
    ],
)
async def test_statement_that_is_not_a_profile_attribute(query: str) -> None:
    """Look-alike sentences do not write a wrong profile attribute."""
    persona = await persona_of(query)

    assert {} == persona.profile


@pytest.mark.parametrize(
    "query",
    [
        "I like the idea of adding nuts.",
        "I love the outdoor games idea!",
        "I like adding them to my soups.",
        "I live in the city.",
        "I'm from a small town.",
    ],
)
async def test_reaction_or_vague_value_is_not_a_fact(query: str) -> None:
    """Reactions to a suggestion and places that name nowhere are not stored as facts."""
    persona = await persona_of(query)

    assert () == persona.facts


async def test_latest_statement_wins_the_profile() -> None:
    """A user who moves has the new city as location, and both facts are kept."""
    persona = await persona_of("I live in Porto.", "I moved to Lisbon last month.")

    assert "Lisbon" == persona.profile["location"]
    assert ["Porto", "Lisbon"] == [fact.value for fact in persona.facts]


async def test_agent_words_are_not_user_facts() -> None:
    """What the agent says about itself is not taken as the user's profile."""
    pages = [PageText(query="Where are you?", response="I live in the cloud, I am a bot.")]

    persona = await OfflineExtractor().extract_persona(pages)

    assert PersonaExtraction() == persona


@pytest.mark.parametrize(
    ("query", "wish"),
    [
        ("Please answer concisely.", "answer concisely"),
        ("Can you be more concise?", "be more concise"),
        ("From now on, reply in Portuguese.", "reply in Portuguese"),
        ("Don't use emojis.", "don't use emojis"),
        ("I want you to act as a travel agent.", "act as a travel agent"),
        ("I prefer short answers.", "give short answers"),
    ],
)
async def test_agent_trait_pattern(query: str, wish: str) -> None:
    """What the user asks the agent to be or do becomes an agent trait."""
    persona = await persona_of(query)

    assert (wish,) == persona.agent_traits


@pytest.mark.parametrize(
    "query", ["Write a poem about the sea.", "Don't worry about it.", "Talk to you later!"]
)
async def test_task_is_not_an_agent_trait(query: str) -> None:
    """One-off requests and pleasantries do not become standing agent traits."""
    persona = await persona_of(query)

    assert () == persona.agent_traits


async def test_trait_evidence_quotes_the_user() -> None:
    """A cue word records its trait with the sentence that said it."""
    persona = await persona_of("Hello there. I spend my weekends baking bread and cooking.")

    assert "I spend my weekends baking bread and cooking." == persona.traits["food_interest"]


async def test_trait_evidence_uses_known_ids_only() -> None:
    """Every trait id in an extraction is one of the 90 dimensions."""
    persona = await persona_of(
        "I'm anxious about my exam and I want short, concise answers with examples.",
        "We watched a movie, then I played video games with my kids.",
    )

    assert set(persona.traits) <= {trait.id for trait in load_traits()}
    assert {"neuroticism", "conciseness", "film_interest", "gaming_interest"} <= set(persona.traits)


async def test_keywords_rank_by_frequency_then_alphabet() -> None:
    """The most repeated stem leads, stemming merges word forms, and ties go alphabetically."""
    page = PageText(
        query="I cook pasta. Cooking pasta is fun, cooked pasta is cheap, pasta rules.",
        response="Zucchini and basil.",
    )

    keywords = await OfflineExtractor().page_keywords(page)

    assert ["pasta", "cook", "basil", "cheap", "fun", "rules", "zucchini"] == keywords


async def test_keywords_are_bounded_and_skip_stopwords() -> None:
    """At most `max_keywords` are returned and filler words never appear."""
    page = PageText(
        query="Well, I think that the weather in Lisbon is really sunny and warm today.",
        response="Yes, Lisbon weather is sunny, warm, mild and pleasant most of the year.",
    )

    keywords = await OfflineExtractor(max_keywords=3).page_keywords(page)

    assert ["lisbon", "sunny", "warm"] == keywords


async def test_chain_summary_is_bounded_and_starts_with_the_opening() -> None:
    """A long chain summary stays within its bound and keeps the opening sentence."""
    long_reply = " ".join(f"Sentence {n} talks about Sintra palaces and trains." for n in range(60))
    pages = [PageText(query="What are good day trips from Lisbon?", response=long_reply)]

    summary = await OfflineExtractor(chain_summary_chars=200).summarise_chain(pages)

    assert len(summary) <= 200
    assert summary.startswith("What are good day trips from Lisbon?")


async def test_chain_summary_of_nothing_is_empty() -> None:
    """An empty chain has an empty summary."""
    assert "" == await OfflineExtractor().summarise_chain([])


async def test_overlong_single_sentence_is_clipped_at_a_word() -> None:
    """A first sentence longer than the bound is cut at a word boundary and marked."""
    pages = said("word " * 100)

    summary = await OfflineExtractor(chain_summary_chars=50).summarise_chain(pages)

    assert len(summary) <= 50
    assert summary.endswith("word…")


async def test_segment_summary_keeps_the_old_topic_and_adds_keywords() -> None:
    """A rewritten segment summary opens with the old summary and is bounded."""
    pages = said("The train to Sintra takes forty minutes from Rossio station.") * 20

    segment = await OfflineExtractor(segment_summary_chars=150).summarise_segment(
        "The user plans day trips from Lisbon.", pages
    )

    assert segment.summary.startswith("The user plans day trips from Lisbon.")
    assert len(segment.summary) <= 150
    assert "sintra" in segment.keywords


@pytest.mark.parametrize(
    ("previous", "query", "linked"),
    [
        (None, "What are good day trips from Lisbon?", False),
        ("What are good day trips from Lisbon?", "How long is the train to Lisbon?", True),
        ("What are good day trips from Lisbon?", "And how long does it take?", True),
        ("What are good day trips from Lisbon?", "What about Porto?", True),
        ("What are good day trips from Lisbon?", "Why?", True),
        ("What are good day trips from Lisbon?", "How do I bake sourdough bread?", False),
    ],
)
async def test_continuity(previous: str | None, query: str, linked: bool) -> None:
    """A page links to the previous one by shared topic words or follow-up cues."""
    before = None if previous is None else PageText(query=previous, response="Sintra.")
    page = PageText(query=query, response="Here is what I found.")

    continuity = await OfflineExtractor().check_continuity(before, page)

    assert linked == continuity.linked


async def test_graph_turns_facts_into_relations_from_the_user() -> None:
    """Where the user lives, works and what they like become edges from the user."""
    text = "I moved to Lisbon last month and I work at Acme Corp. I like jazz."

    graph = await OfflineExtractor().extract_graph(text)

    assert (
        Relation(source="user", relation="lives_in", target="Lisbon"),
        Relation(source="user", relation="works_at", target="Acme Corp"),
        Relation(source="user", relation="likes", target="jazz"),
    ) == graph.relations
    assert {
        Entity(name="user", type="person"),
        Entity(name="Lisbon", type="place"),
        Entity(name="Acme Corp", type="org"),
        Entity(name="jazz", type="thing"),
    } == set(graph.entities)


async def test_graph_types_capitalised_names_by_cues() -> None:
    """Multi-word names are kept whole and typed by titles, suffixes and prepositions."""
    text = (
        "Yesterday I met Dr John Smith at the University of Porto. "
        "He flew in from New York and now advises NASA."
    )

    graph = await OfflineExtractor().extract_graph(text)

    assert [
        Entity(name="Dr John Smith", type="person"),
        Entity(name="University of Porto", type="org"),
        Entity(name="New York", type="place"),
        Entity(name="NASA", type="org"),
    ] == list(graph.entities)


async def test_graph_prefers_the_fact_type_for_a_pet() -> None:
    """A pet named like a person is a thing, and every edge's end is an entity."""
    graph = await OfflineExtractor().extract_graph("I have a dog named Rex. Rex loves parks.")

    assert Entity(name="Rex", type="thing") in graph.entities
    names = {entity.name for entity in graph.entities}
    assert all({r.source, r.target} <= names for r in graph.relations)


async def test_same_input_gives_the_same_output() -> None:
    """Two extractors give identical answers to the same pages, on every step."""
    pages = said(
        "I moved to Lisbon last month. I work as a teacher and I love surfing.",
        "Please keep answers short. What beaches near Lisbon are good for surfing?",
    )
    text = " ".join(page.query for page in pages)

    async def run(llm: OfflineExtractor) -> tuple[object, ...]:
        """Run every step of the port once."""
        return (
            await llm.check_continuity(pages[0], pages[1]),
            await llm.summarise_chain(pages),
            await llm.page_keywords(pages[1]),
            await llm.summarise_segment("Surfing near Lisbon.", pages),
            await llm.extract_persona(pages),
            await llm.extract_graph(text),
        )

    assert await run(OfflineExtractor()) == await run(OfflineExtractor())


def test_offline_extractor_fits_the_port_and_names_itself() -> None:
    """The extractor satisfies MemoryLlm and records itself as offline-v1."""
    llm = OfflineExtractor()

    assert isinstance(llm, MemoryLlm)
    assert "offline-v1" == llm.name
