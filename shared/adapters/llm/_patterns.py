"""English sentence patterns for what users say about themselves and ask of the agent.

Each pattern turns a first-person statement into a `Finding`: a fact about the user, whether it
belongs in the static profile, and the knowledge-graph edge it implies. The patterns favour
precision: a missed fact costs less than a wrong one written into long-term memory.
"""

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memoryd.shared.adapters.llm._text import sentences, word_set
from memoryd.shared.adapters.llm.port import EntityType

__all__ = ["Finding", "agent_wishes", "findings"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a user said about themselves, with where it goes in memory."""

    attribute: str
    value: str
    text: str
    in_profile: bool
    relation: str | None
    value_type: EntityType


# Words that end a captured value: conjunctions, relative pronouns and time phrases, so that
# "I moved to Lisbon last month" captures "Lisbon".
_ENDINGS = (
    r"and|but|because|since|so|which|who|where|when|while|though|although|if|or|too|as well"
    r"|last|next|this|these|recently|yesterday|today|tonight|now|ago|already|lately|anymore"
    r"|a lot|very much|so much|a few|for \d+|about \d+|\d+ (?:days?|weeks?|months?|years?)"
)
_PREPOSITIONS = r"in|at|for|with|of|from|on|near|by|as"
_NAME_WORD = r"(?-i:[A-Z][\w'-]*)"
_ONE_NAME = rf"{_NAME_WORD}(?:\s+{_NAME_WORD}){{0,3}}"
_NAME = rf"(?P<value>{_ONE_NAME})"
# "Tom", "Tom and Lucy", "Tom, Lucy and Max": one finding per name.
_NAMES = rf"(?P<value>{_ONE_NAME}(?:(?:\s*,\s*|\s+and\s+){_ONE_NAME})*)"
_NAME_SEPARATOR = re.compile(r"\s*,\s*|\s+and\s+")
_MAX_VALUE_WORDS = 6
_MAX_WISH_WORDS = 12
_VAGUE = word_set(
    "it this that them these those him her you your me us there here one something anything "
    "everything nothing what which lot bit some"
)
# A value that points back at the conversation ("adding them to my soups") is no fact.
_POINTING = word_set("it its this that them these those you your")
# "I like the idea of X", "I love the sound of that": reactions to a suggestion, not tastes.
_REACTION_OPENINGS = ("the idea", "the sound", "the suggestion", "the way", "the look", "the fact")
_REACTION_WORDS = word_set(
    "idea ideas suggestion suggestions recommendation recommendations option options tip tips"
)
_OCCUPATIONS = word_set(
    """
    accountant actor actress analyst architect artist assistant baker banker barber barista
    biologist carpenter cashier ceo chef chemist cleaner clerk coach consultant contractor cook
    cto dancer designer dentist developer director doctor driver economist editor electrician
    engineer entrepreneur farmer firefighter founder freelancer gardener hairdresser homemaker
    intern journalist judge lawyer lecturer librarian manager mathematician mechanic midwife
    musician nanny nurse officer paramedic pharmacist photographer physician physicist pilot
    plumber policeman politician producer professor programmer psychologist realtor receptionist
    researcher retiree salesman scientist secretary singer soldier student surgeon tailor
    teacher technician therapist translator tutor vet veterinarian waiter waitress writer
    """
)
_PETS = word_set(
    """
    dog cat puppy kitten pup hamster parrot rabbit bunny fish goldfish bird horse pony turtle
    tortoise snake lizard gecko ferret retriever labrador terrier spaniel poodle beagle bulldog
    shepherd husky collie dachshund chihuahua pug tabby
    """
)
_CHILDREN = word_set("son daughter kid child boy girl baby toddler stepson stepdaughter")
_KIN = (
    r"wife|husband|partner|boyfriend|girlfriend|fianc[ée]e?|son|daughter|brother|sister|mother"
    r"|mom|mum|father|dad|grandmother|grandfather|grandma|grandpa|aunt|uncle|cousin|best friend"
    r"|friend|boss|dog|cat|puppy|kitten|hamster|parrot|rabbit|horse"
)
# Kin whose name is a single-valued profile attribute; other kin become facts only.
_PROFILE_KIN = {
    "wife": "spouse",
    "husband": "spouse",
    "partner": "partner",
    "boyfriend": "partner",
    "girlfriend": "partner",
    "fiance": "partner",
    "fiancé": "partner",
    "fiancee": "partner",
    "fiancée": "partner",
    "mother": "mother",
    "mom": "mother",
    "mum": "mother",
    "father": "father",
    "dad": "father",
}
_KIN_RELATION = {"spouse": "married_to", "partner": "partner_of"}


def _value(extra_endings: str = "") -> str:
    """Build the capture group for a free-text value that stops at a clause boundary."""
    endings = f"{_ENDINGS}|{extra_endings}" if extra_endings else _ENDINGS
    return rf"(?P<value>[^.,;:!?()\"]+?)(?=\s+(?:{endings})\b|\s*[.,;:!?()\"]|\s*$)"


def _compile(pattern: str) -> re.Pattern[str]:
    """Compile a pattern case-insensitively; name captures switch that off themselves."""
    return re.compile(pattern, re.IGNORECASE)


def _clean(value: str) -> str | None:
    """Tidy a captured value, or reject it when it is vague, empty or too long to be one."""
    tidy = " ".join(value.split()).strip(" '\"")
    first = tidy.split(" ", 1)[0].lower() if tidy else ""
    if not tidy or first in _VAGUE or tidy.lower() in _VAGUE:
        return None
    if len(tidy.split()) > _MAX_VALUE_WORDS or _POINTING & set(tidy.lower().split()):
        return None
    return tidy


def _with_article(noun: str) -> str:
    """Put "a" or "an" before a noun phrase that has no article yet."""
    if noun.lower().startswith(("a ", "an ", "the ")):
        return noun
    return f"an {noun}" if noun[0].lower() in "aeiou" else f"a {noun}"


def _without_article(noun: str) -> str:
    """Drop a leading "a", "an" or "the"."""
    head, _, rest = noun.partition(" ")
    return rest if head.lower() in {"a", "an", "the"} and rest else noun


def _snake(text: str) -> str:
    """Turn a short phrase into a snake_case attribute name."""
    return "_".join(re.findall(r"[a-z0-9]+", text.lower()))


_Builder = Callable[[re.Match[str]], tuple[Finding, ...]]


def _simple(
    attribute: str, template: str, relation: str | None, value_type: EntityType, in_profile: bool
) -> _Builder:
    """Make a builder that fills one sentence template with the captured value."""

    def build(match: re.Match[str]) -> tuple[Finding, ...]:
        value = _clean(match["value"])
        if value is None:
            return ()
        text = template.format(value=value)
        return (Finding(attribute, value, text, in_profile, relation, value_type),)

    return build


def _place(attribute: str, template: str, relation: str) -> _Builder:
    """Make a builder for a place, which must name somewhere: "the city" is not a location."""
    simple = _simple(attribute, template, relation, "place", True)

    def build(match: re.Match[str]) -> tuple[Finding, ...]:
        found = simple(match)
        return tuple(f for f in found if any(word[0].isupper() for word in f.value.split()))

    return build


def _is_reaction(value: str) -> bool:
    """Say whether a liked value is a reaction to a suggestion rather than a taste."""
    lowered = value.lower()
    return lowered.startswith(_REACTION_OPENINGS) or lowered.split()[-1] in _REACTION_WORDS


def _liking(attribute: str, template: str) -> _Builder:
    """Make a builder for likes and dislikes: "I love to cook" records the value "cook"."""

    def build(match: re.Match[str]) -> tuple[Finding, ...]:
        said = _clean(match["value"])
        if said is None or _is_reaction(said):
            return ()
        value = said[3:] if said.lower().startswith("to ") else said
        text = template.format(value=said)
        return (Finding(attribute, value, text, False, attribute, "thing"),)

    return build


def _occupation(match: re.Match[str]) -> tuple[Finding, ...]:
    """Build an occupation finding from "I work as a nurse" or "I'm a nurse"."""
    value = _clean(match["value"])
    if value is None:
        return ()
    role = _without_article(value)
    # "I'm a big fan of jazz" is not a job: the bare "I am a X" form needs a known occupation.
    if match.groupdict().get("strict") and role.split()[-1].lower() not in _OCCUPATIONS:
        return ()
    text = f"The user works as {_with_article(role)}."
    return (Finding("occupation", role, text, True, "works_as", "thing"),)


def _favourite(match: re.Match[str]) -> tuple[Finding, ...]:
    """Build a favourite-thing finding from "my favourite book is Dune"."""
    value = _clean(match["value"])
    if value is None:
        return ()
    topic = " ".join(match["topic"].lower().split())
    text = f"The user's favourite {topic} is {value}."
    return (Finding(f"favourite_{_snake(topic)}", value, text, True, "likes", "thing"),)


def _singular(noun: str) -> str:
    """Return the singular of a plural noun naming kin or pets ("kids", "children", "cats")."""
    if noun == "children":
        return "child"
    return noun[:-1] if noun.endswith("s") and not noun.endswith("ss") else noun


def _kin_finding(kind: str, name: str, owned: bool) -> Finding:
    """Build the finding for one named relative or pet."""
    head = kind.split()[-1]
    if head in _PROFILE_KIN:
        attribute = _PROFILE_KIN[head]
        relation = _KIN_RELATION.get(attribute, f"has_{attribute}")
        text = f"The user's {kind} is named {name}."
        return Finding(attribute, name, text, True, relation, "person")
    if owned:
        text = f"The user has {_with_article(kind)} named {name}."
    else:
        text = f"The user's {kind} is named {name}."
    if head in _PETS:
        return Finding("pet", name, text, False, f"has_{head}", "thing")
    attribute = "child" if head in _CHILDREN else _snake(head)
    return Finding(attribute, name, text, False, f"has_{_snake(head)}", "person")


def _named(match: re.Match[str]) -> tuple[Finding, ...]:
    """Build findings from "I have two kids named Tom and Lucy" or "my wife is Maria"."""
    words = match["kind"].lower().split()
    several = match.groupdict().get("several") is not None
    kind = " ".join([*words[:-1], _singular(words[-1])]) if several else " ".join(words)
    owned = match.groupdict().get("owned") is not None
    names = _NAME_SEPARATOR.split(match["value"])
    return tuple(_kin_finding(kind, name, owned) for name in names)


_RULES: tuple[tuple[re.Pattern[str], _Builder], ...] = (
    (
        _compile(
            r"\bI(?:'m| am)?\s+(?:currently\s+|now\s+|still\s+)?(?:live|living|reside|residing"
            rf"|based)\s+(?:in|at)\s+{_value('with|near|for')}"
        ),
        _place("location", "The user lives in {value}.", "lives_in"),
    ),
    (
        _compile(
            r"\bI(?:'ve| have)?\s+(?:just\s+|recently\s+|finally\s+)?(?:moved|relocated)\s+"
            rf"(?:back\s+)?to\s+{_value('with|for')}"
        ),
        _place("location", "The user moved to {value}.", "lives_in"),
    ),
    (
        _compile(rf"\bI(?:'m| am)\s+(?:originally\s+)?from\s+{_value()}"),
        _place("hometown", "The user is from {value}.", "from"),
    ),
    (
        _compile(rf"\bI\s+(?:originally\s+)?come\s+from\s+{_value()}"),
        _place("hometown", "The user is from {value}.", "from"),
    ),
    (
        _compile(rf"\bI\s+grew\s+up\s+in\s+{_value('with|near')}"),
        _place("hometown", "The user grew up in {value}.", "from"),
    ),
    (
        _compile(rf"\b(?:my\s+name\s+is|my\s+name's|call\s+me)\s+{_NAME}"),
        _simple("name", "The user's name is {value}.", "named", "person", True),
    ),
    (
        _compile(
            r"\bI(?:'m| am)?\s+(?:currently\s+)?(?:work|working)\s+as\s+"
            rf"{_value(_PREPOSITIONS)}"
        ),
        _occupation,
    ),
    (
        _compile(rf"\bI(?:'m| am)\s+(?P<strict>an?)\s+{_value(_PREPOSITIONS + '|who|that')}"),
        _occupation,
    ),
    (
        _compile(
            r"\bI(?:'m| am)?\s+(?:currently\s+)?(?:work|working|employed)\s+(?:at|for|by)\s+"
            rf"{_value('as|in|on|since')}"
        ),
        _simple("employer", "The user works at {value}.", "works_at", "org", True),
    ),
    (
        _compile(
            r"\bmy\s+(?:all-time\s+|absolute\s+)?favou?rite\s+"
            rf"(?P<topic>[a-z]+(?:\s+[a-z]+){{0,2}}?)\s+(?:is|are|was|would be)\s+{_value()}"
        ),
        _favourite,
    ),
    (
        _compile(
            r"\bI\s+(?:really\s+|also\s+|absolutely\s+|just\s+|truly\s+)?(?:like|love|enjoy"
            rf"|adore)\s+{_value('with')}"
        ),
        _liking("likes", "The user likes {value}."),
    ),
    (
        _compile(
            r"\bI\s+(?:really\s+|absolutely\s+|just\s+)?(?:hate|dislike|detest|can't\s+stand"
            rf"|cannot\s+stand|don't\s+like|do\s+not\s+like)\s+{_value('with')}"
        ),
        _liking("dislikes", "The user dislikes {value}."),
    ),
    (
        _compile(
            r"\bI(?:'m|\s+am)\s+(?:a\s+)?(?:really\s+)?(?:big\s+|huge\s+)?fan\s+of\s+"
            rf"{_value('with')}"
        ),
        _liking("likes", "The user is a fan of {value}."),
    ),
    (
        _compile(
            r"\bI(?P<owned>\s+have\s+got|\s+have|'ve\s+got|'ve|\s+own)\s+(?:an?\s+|one\s+"
            r"|(?P<several>two|three|four|five|[2-9])\s+)?"
            r"(?:(?:little|young|old|new|baby|[\w]+-year-old)\s+)?"
            rf"(?P<kind>[a-z]+(?:\s+[a-z]+)?)\s+(?:named|called)\s+{_NAMES}"
        ),
        _named,
    ),
    (
        _compile(
            rf"\bmy\s+(?P<kind>{_KIN})(?:'s\s+name\s+is|\s+is\s+(?:named|called)|\s+named"
            rf"|\s+called|\s+is|,)?\s+{_NAMES}"
        ),
        _named,
    ),
    (
        _compile(
            r"\bI(?:'m| am)\s+(?P<value>\d{1,3})(?:\s+(?:years?|yrs?)\s+old|\s+years\s+of\s+age"
            r"|\s*[.!]|\s*$)"
        ),
        _simple("age", "The user is {value} years old.", None, "thing", True),
    ),
    (
        _compile(r"\bI\s+(?:just\s+)?turned\s+(?P<value>\d{1,3})\b"),
        _simple("age", "The user is {value} years old.", None, "thing", True),
    ),
    (
        _compile(rf"\bmy\s+birthday\s+is\s+(?:on\s+)?{_value()}"),
        _simple("birthday", "The user's birthday is {value}.", None, "thing", True),
    ),
    (
        _compile(rf"\bI\s+was\s+born\s+on\s+{_value()}"),
        _simple("birthday", "The user was born on {value}.", None, "thing", True),
    ),
    (
        _compile(r"\bI\s+was\s+born\s+in\s+(?P<value>\d{4})\b"),
        _simple("birth_year", "The user was born in {value}.", None, "thing", True),
    ),
    (
        _compile(rf"\bI\s+was\s+born\s+in\s+(?!\d{{4}}\b){_value()}"),
        _place("birthplace", "The user was born in {value}.", "born_in"),
    ),
)


def _sentence_findings(sentence: str) -> Iterator[Finding]:
    """Yield the findings of one sentence in the order they are said."""
    hits: list[tuple[int, int, Finding]] = []
    for order, (pattern, build) in enumerate(_RULES):
        for match in pattern.finditer(sentence):
            hits.extend((match.start(), order, finding) for finding in build(match))
    for _, _, finding in sorted(hits, key=lambda hit: (hit[0], hit[1])):
        yield finding


def findings(text: str) -> list[Finding]:
    """Return what the speaker says about themselves, in order, each fact once."""
    seen: set[str] = set()
    found: list[Finding] = []
    for sentence in sentences(text):
        for finding in _sentence_findings(sentence):
            if finding.text not in seen:
                seen.add(finding.text)
                found.append(finding)
    return found


# Verbs that set how the agent talks even when said bare ("Be concise", "Answer in French");
# other imperatives ("Write a poem") are tasks unless said as a standing rule.
_STYLE_VERBS = r"answer|respond|reply|be|keep|avoid|stop|speak"
_RULE_VERBS = (
    rf"{_STYLE_VERBS}|use|include|add|mention|write|give|say|call|start|end|explain|format"
    r"|apologi[sz]e|ask|repeat|sign|switch|translate|assume|recommend|suggest|act|address"
    r"|refer|show|cite|list|talk|treat"
)
_CLAUSE = r"[^.!?;,]*"
_WISH_RULES: tuple[re.Pattern[str], ...] = (
    _compile(
        r"^(?:please,?\s+)?(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?)?"
        rf"(?P<value>(?:{_STYLE_VERBS})\s+\w{_CLAUSE})"
    ),
    _compile(
        r"^(?:please,?\s+)?"
        rf"(?P<value>(?:always|never|don't|do\s+not)\s+(?:{_RULE_VERBS})\b{_CLAUSE})"
    ),
    _compile(
        r"\bI(?:\s+want|'d\s+like|\s+would\s+like)\s+you\s+to\s+"
        rf"(?P<value>(?:(?:always|never)\s+)?(?:{_RULE_VERBS})\b{_CLAUSE})"
    ),
    _compile(
        r"\b(?:from\s+now\s+on|going\s+forward|in\s+(?:the\s+)?future),?\s+"
        rf"(?:please,?\s+)?(?P<value>\w{_CLAUSE})"
    ),
)
_PREFERENCE = _compile(
    r"\bI\s+prefer\s+(?P<value>[a-z]+(?:\s+[a-z]+)?\s+(?:answers|responses|replies"
    r"|explanations|messages))\b"
)


def _tidy_wish(text: str) -> str | None:
    """Normalise a wish to a lowercase-led clause without a trailing "please"."""
    tidy = " ".join(text.split()).rstrip(" ,")
    tidy = re.sub(r",?\s+please$", "", tidy, flags=re.IGNORECASE)
    if not tidy or len(tidy.split()) > _MAX_WISH_WORDS:
        return None
    return tidy[0].lower() + tidy[1:]


def _sentence_wish(sentence: str) -> str | None:
    """Return what a sentence asks the agent to be or do as a standing rule, if anything."""
    preference = _PREFERENCE.search(sentence)
    if preference is not None:
        return _tidy_wish(f"give {preference['value']}")
    for pattern in _WISH_RULES:
        match = pattern.search(sentence.rstrip(".!?"))
        if match is not None:
            return _tidy_wish(match["value"])
    return None


def agent_wishes(text: str) -> list[str]:
    """Return what the speaker asks the agent to be or do, in order, each once."""
    found = (_sentence_wish(sentence) for sentence in sentences(text))
    return list(dict.fromkeys(wish for wish in found if wish is not None))
