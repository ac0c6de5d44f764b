"""Validation errors as one line: a log line, a dead-letter reason, a CLI message."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

_MAX_MESSAGE = 200


def _path(loc: tuple[int | str, ...]) -> str:
    # A tagged union puts its tag first ("turn.recorded.v1"); field names are identifiers,
    # so a leading part that is not one is the tag, which the subject already names.
    parts = list(loc)
    if parts and isinstance(parts[0], str) and not parts[0].isidentifier():
        parts = parts[1:]
    return ".".join(str(part) for part in parts)


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _MAX_MESSAGE else flat[: _MAX_MESSAGE - 3] + "..."


def describe_validation_error(error: ValidationError) -> str:
    """Return each failed field's path and rule on one line, never the input values.

    ``scope.user_id: String should match pattern '...'; query: Field required``. The input
    is left out: it may hold a secret, and the dead letter keeps the original bytes anyway.
    """
    return describe_errors(
        error.errors(include_url=False, include_input=False, include_context=False)
    )


def describe_errors(errors: Iterable[Mapping[str, Any]]) -> str:
    """Return pydantic error details (``loc`` and ``msg`` of each) as one line, no inputs."""
    problems = []
    for detail in errors:
        path = _path(tuple(detail["loc"]))
        message = _clip(str(detail["msg"]))
        problems.append(f"{path}: {message}" if path else message)
    return "; ".join(problems)
