"""Answer a read-only request-reply of the query service: decode, wall, answer, encode.

Bad input is answered ``invalid_request`` (the fields named), a request whose scope names
another tenant than its subject ``forbidden``, a failure ``internal`` without its detail.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Literal, TypeVar

import structlog
from pydantic import BaseModel, ValidationError

from memoryd.services.recall.tenancy import tenant_refusal
from memoryd.shared.contracts.errors import describe_validation_error
from memoryd.shared.contracts.scope import Scope

log = structlog.get_logger(__name__)

Code = Literal["invalid_request", "forbidden", "internal"]


R = TypeVar("R", bound=BaseModel)


async def reply(
    subject: str,
    body: bytes,
    request_type: type[R],
    answer: Callable[[R, datetime], Awaitable[BaseModel]],
    error: Callable[[Code, str], BaseModel],
) -> bytes:
    """Decode ``body`` as ``request_type``, answer it at the current time, encode the reply.

    ``error(code, message)`` builds the refusal this request-reply answers with.
    """
    name = request_type.__name__
    try:
        request = request_type.model_validate_json(body)
    except ValidationError as invalid:
        return _encoded(error("invalid_request", describe_validation_error(invalid)))
    tenant = _scope_of(request).tenant
    refusal = tenant_refusal(subject, tenant)
    if refusal is not None:
        log.warning("request_refused", request=name, subject=subject)
        return _encoded(error("forbidden", refusal))
    try:
        answered = await answer(request, datetime.now(UTC))
    except Exception:
        log.exception("request_failed", request=name, tenant=tenant)
        return _encoded(error("internal", f"answering a {name} failed; see the service log"))
    return _encoded(answered)


def _scope_of(request: BaseModel) -> Scope:
    scope = getattr(request, "scope", None)
    if not isinstance(scope, Scope):
        raise TypeError(f"{type(request).__name__} names no scope")
    return scope


def _encoded(model: BaseModel) -> bytes:
    return model.model_dump_json().encode()
