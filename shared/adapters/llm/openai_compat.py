"""Answer the LLM port through any OpenAI-compatible chat completions endpoint.

Every answer is JSON validated against the step's model. A malformed or off-schema answer, a
timeout, a dropped connection, a 429 or a 5xx is retried with jittered exponential backoff;
when the attempts run out the step raises `LlmFailure`. A circuit breaker then makes further
calls fail at once, so a dead endpoint costs the pipeline nothing but the error.
"""

import asyncio
import random
import re
from collections.abc import Iterable, Sequence
from typing import TypeVar

import openai
import structlog
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel, ConfigDict, ValidationError

from memoryd.shared.adapters.llm import prompts
from memoryd.shared.adapters.llm.port import (
    Continuity,
    GraphExtraction,
    LlmFailure,
    PageText,
    PersonaExtraction,
    SegmentSummary,
)
from memoryd.shared.adapters.llm.resilience import CircuitBreaker, backoff_delay
from memoryd.shared.adapters.llm.traits import load_traits
from memoryd.shared.contracts.events import nul_path

__all__ = ["OpenAIChatLlm"]

log = structlog.get_logger(__name__)

_Model = TypeVar("_Model", bound=BaseModel)
_FENCE = re.compile(r"^\s*```(?:json)?\s*(?P<body>.*?)\s*```\s*$", re.DOTALL)
_RETRYABLE_STATUS = 429


class _SummaryAnswer(BaseModel):
    """The JSON answer of a chain summary."""

    model_config = ConfigDict(frozen=True)

    summary: str


class _KeywordsAnswer(BaseModel):
    """The JSON answer of a keyword extraction."""

    model_config = ConfigDict(frozen=True)

    keywords: tuple[str, ...]


class _Retry(Exception):
    """An attempt failed in a way another attempt may not."""


def _unfenced(content: str) -> str:
    """Strip a Markdown code fence that some models put around JSON despite being asked not to."""
    match = _FENCE.match(content)
    return match["body"] if match else content


def _parsed(content: str | None, schema: type[_Model]) -> _Model:
    """Validate an answer against the step's model, or say why it cannot be used."""
    if not content:
        raise _Retry("empty answer")
    try:
        answer = schema.model_validate_json(_unfenced(content))
    except ValidationError as error:
        first = error.errors()[0]
        if first["type"] == "json_invalid":
            raise _Retry("malformed JSON") from error
        where = ".".join(str(part) for part in first["loc"])
        raise _Retry(f"schema mismatch at {where or 'top level'}: {first['msg']}") from error
    # The events recording an answer refuse NUL characters (PostgreSQL cannot store them):
    # such an answer is unusable, so it is retried and then falls back like any other.
    nul_at = nul_path(answer)
    if nul_at is not None:
        raise _Retry(f"NUL character in the answer at {nul_at}")
    return answer


def _tidy_keywords(raw: Iterable[str], limit: int) -> list[str]:
    """Lowercase, trim and de-duplicate keywords, keeping their order, at most `limit`."""
    tidy = (" ".join(keyword.lower().split()) for keyword in raw)
    return list(dict.fromkeys(keyword for keyword in tidy if keyword))[:limit]


def _known_traits(extraction: PersonaExtraction) -> PersonaExtraction:
    """Drop trait ids that are not among the 90 dimensions: a model sometimes invents one."""
    known = {trait.id for trait in load_traits()}
    kept = {key: value for key, value in extraction.traits.items() if key in known}
    if len(kept) < len(extraction.traits):
        log.info("llm_unknown_traits_dropped", dropped=sorted(set(extraction.traits) - known))
    return extraction.model_copy(update={"traits": kept})


def _messages(prompt: prompts.Prompt) -> list[ChatCompletionMessageParam]:
    """Turn a prompt into chat messages."""
    return [
        {"role": "system", "content": prompt.system},
        {"role": "user", "content": prompt.user},
    ]


class OpenAIChatLlm:
    """The MemoryLlm port over an OpenAI-compatible chat endpoint, with retries and a breaker."""

    def __init__(  # noqa: PLR0913 (the endpoint and its failure policy, keyword-only)
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "no-key",
        timeout: float = 30.0,
        attempts: int = 3,
        base_delay: float = 0.5,
        max_delay: float = 8.0,
        breaker: CircuitBreaker | None = None,
        max_keywords: int = 8,
        temperature: float | None = 0.0,
        json_mode: bool = True,
        rng: random.Random | None = None,
    ) -> None:
        """Configure the endpoint and the failure policy.

        Local OpenAI-compatible servers ignore `api_key`, but the client will not start
        without one, hence the placeholder. `temperature=None` leaves it to the server, for
        models that reject the parameter; `json_mode=False` drops `response_format` for
        servers that do not support it.
        """
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        # The client's own retries are off: this class retries, with the breaker's knowledge.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=0
        )
        self._model = model
        self._attempts = attempts
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._breaker = breaker if breaker is not None else CircuitBreaker()
        self._max_keywords = max_keywords
        self._temperature = temperature
        self._json_mode = json_mode
        self._rng = rng if rng is not None else random.Random()

    @property
    def name(self) -> str:
        """Name this implementation and its model in the events it decides."""
        return f"openai:{self._model}"

    async def check_continuity(self, previous: PageText | None, page: PageText) -> Continuity:
        """Ask whether a page continues the previous one; a first page never does."""
        if previous is None:
            return Continuity(linked=False)
        return await self._ask("check_continuity", prompts.continuity(previous, page), Continuity)

    async def summarise_chain(self, pages: Sequence[PageText]) -> str:
        """Ask for the meta-chain summary of linked pages."""
        if not pages:
            return ""
        prompt = prompts.chain_summary(pages)
        return (await self._ask("summarise_chain", prompt, _SummaryAnswer)).summary.strip()

    async def page_keywords(self, page: PageText) -> list[str]:
        """Ask for a page's keywords."""
        prompt = prompts.page_keywords(page, self._max_keywords)
        answer = await self._ask("page_keywords", prompt, _KeywordsAnswer)
        return _tidy_keywords(answer.keywords, self._max_keywords)

    async def summarise_segment(
        self, previous_summary: str, pages: Sequence[PageText]
    ) -> SegmentSummary:
        """Ask for a segment's rewritten summary and keywords."""
        prompt = prompts.segment_summary(previous_summary, pages, self._max_keywords)
        answer = await self._ask("summarise_segment", prompt, SegmentSummary)
        keywords = tuple(_tidy_keywords(answer.keywords, self._max_keywords))
        return SegmentSummary(summary=answer.summary.strip(), keywords=keywords)

    async def extract_persona(self, pages: Sequence[PageText]) -> PersonaExtraction:
        """Ask for the user's profile, facts, trait evidence and wishes for the agent."""
        prompt = prompts.persona(pages, load_traits())
        return _known_traits(await self._ask("extract_persona", prompt, PersonaExtraction))

    async def extract_graph(self, text: str) -> GraphExtraction:
        """Ask for a text's entities and relations."""
        return await self._ask("extract_graph", prompts.graph(text), GraphExtraction)

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._client.close()

    async def _ask(self, step: str, prompt: prompts.Prompt, schema: type[_Model]) -> _Model:
        """Get a valid answer within the attempts, or raise LlmFailure; keep the breaker told."""
        if not self._breaker.allow():
            raise LlmFailure(step, "circuit open", 0)
        reason = "no attempt made"
        for attempt in range(1, self._attempts + 1):
            try:
                answer = _parsed(await self._complete(prompt), schema)
            except _Retry as error:
                reason = str(error)
                log.warning("llm_attempt_failed", step=step, attempt=attempt, reason=reason)
            except openai.APIStatusError as error:
                # A 4xx other than 429 (bad key, unknown model) will not heal by retrying.
                self._breaker.record_failure()
                raise LlmFailure(step, f"HTTP {error.status_code}", attempt) from error
            else:
                self._breaker.record_success()
                return answer
            if attempt < self._attempts:
                await self._back_off(attempt)
        self._breaker.record_failure()
        raise LlmFailure(step, reason, self._attempts)

    async def _back_off(self, attempt: int) -> None:
        """Wait before the next attempt: jittered, growing exponentially, capped."""
        delay = backoff_delay(attempt, base=self._base_delay, cap=self._max_delay, rng=self._rng)
        await asyncio.sleep(delay)

    async def _complete(self, prompt: prompts.Prompt) -> str | None:
        """Send one chat completion; turn transient transport errors into `_Retry`."""
        try:
            completion = await self._client.chat.completions.create(
                model=self._model,
                messages=_messages(prompt),
                temperature=openai.omit if self._temperature is None else self._temperature,
                response_format=({"type": "json_object"} if self._json_mode else openai.omit),
            )
        except openai.APITimeoutError as error:
            raise _Retry("timeout") from error
        except openai.APIConnectionError as error:
            raise _Retry("connection failed") from error
        except openai.APIStatusError as error:
            if error.status_code == _RETRYABLE_STATUS or error.status_code >= 500:
                raise _Retry(f"HTTP {error.status_code}") from error
            raise
        if not completion.choices:
            return None
        return completion.choices[0].message.content
