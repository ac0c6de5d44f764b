"""structlog set-up: readable in a terminal, JSON in production, secrets never shown."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, MutableMapping
from typing import Any

import structlog

MASK = "***"
# Shorter values would mask ordinary words; every secret memoryd makes is far longer.
MIN_SECRET_CHARS = 6


class Redactor:
    """Mask every known secret (API keys, passwords) in text: log lines, errors, dead letters.

    Secrets reach memoryd in settings; an error from a client library (an endpoint that echoes
    the key it refused, a URL with a password) could still carry one, so whatever is written
    out goes through ``scrub``.
    """

    def __init__(self) -> None:
        self._secrets: tuple[str, ...] = ()

    def add(self, values: Iterable[str]) -> None:
        """Add secret values to mask (the longest first, so no part of one is left)."""
        known = {*self._secrets, *(v for v in values if len(v) >= MIN_SECRET_CHARS)}
        self._secrets = tuple(sorted(known, key=len, reverse=True))

    def scrub(self, text: str) -> str:
        """Return ``text`` with every known secret replaced by ``***``."""
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def __call__(
        self, _logger: Any, _method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        """A structlog processor: scrub every value of the event (rendered as text if needed)."""
        if not self._secrets:
            return event
        for key, value in event.items():
            if isinstance(value, (int, float, bool)) or value is None:
                continue
            text = value if isinstance(value, str) else str(value)
            scrubbed = self.scrub(text)
            if scrubbed != text:
                event[key] = scrubbed
        return event


# One per process: settings register their secrets at start, every output path scrubs.
REDACTOR = Redactor()


def configure_logging(fmt: str = "auto", level: str = "INFO") -> None:
    """Configure structlog once for the process."""
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            REDACTOR,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
        ),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
