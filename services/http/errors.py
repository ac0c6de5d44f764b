"""What a failed HTTP request answers: ``ErrorBody`` with the recall service's codes.

Bad input is 422 ``invalid_request`` naming the field (never FastAPI's default body); no or
an unknown token 401 ``unauthorized``; a scope the token does not grant 403 ``forbidden``;
memoryd at capacity or not answering 503 (``overloaded``, ``unavailable``); a timeout 504
``deadline_exceeded``; anything unforeseen 500 ``internal``, without its detail.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from nats.errors import NoRespondersError
from starlette.exceptions import HTTPException

from memoryd.shared.adapters.nats_log import PublishFailed
from memoryd.shared.client import BrowseFailed, ListMemoriesFailed, RecallFailed
from memoryd.shared.contracts.errors import describe_errors
from memoryd.shared.contracts.http import ErrorBody, HttpErrorCode

log = structlog.get_logger(__name__)

STATUS: dict[HttpErrorCode, int] = {
    "invalid_request": 422,
    "unauthorized": 401,
    "forbidden": 403,
    "not_found": 404,
    "internal": 500,
    "overloaded": 503,
    "unavailable": 503,
    "deadline_exceeded": 504,
}
# What a status Starlette raises itself (an unknown route, a wrong method) is called.
CODE_OF_STATUS: dict[int, HttpErrorCode] = {401: "unauthorized", 403: "forbidden", 404: "not_found"}
# Where FastAPI says a bad value was (the body, the query...): the field's name says enough.
LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})
# Failures of memoryd itself, not of the request.
SERVICE_FAILURES: tuple[type[Exception], ...] = (
    RecallFailed,
    ListMemoriesFailed,
    BrowseFailed,
    PublishFailed,
    NoRespondersError,
    TimeoutError,
)


class ApiError(Exception):
    """A request refused with ``code`` (its status follows) and a message saying why."""

    def __init__(
        self, code: HttpErrorCode, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.body = ErrorBody(code=code, message=message)
        self.headers = dict(headers or {})

    @property
    def status(self) -> int:
        """Return the HTTP status of the error's code."""
        return STATUS[self.body.code]


def service_error(failure: Exception) -> ApiError:
    """Return the API error a failure of memoryd's services is answered with."""
    if isinstance(failure, RecallFailed | ListMemoriesFailed | BrowseFailed):
        return ApiError(failure.error.code, failure.error.message)
    if isinstance(failure, NoRespondersError):
        return ApiError("unavailable", "no recall service answers: is memoryd's recall running?")
    if isinstance(failure, PublishFailed):
        return ApiError("unavailable", "the event log did not acknowledge: try again")
    return ApiError("deadline_exceeded", "memoryd did not answer in time: try again")


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """Return FastAPI's validation errors as one line, each field named without its location."""
    located = [
        {**detail, "loc": tuple(detail["loc"])[1:]}
        if detail["loc"] and detail["loc"][0] in LOCATIONS
        else detail
        for detail in errors
    ]
    return describe_errors(located)


def _answer(error: ApiError) -> JSONResponse:
    return JSONResponse(error.body.model_dump(), status_code=error.status, headers=error.headers)


async def _api_error(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, ApiError)
    log.info("http_refused", path=request.url.path, code=error.body.code)
    return _answer(error)


async def _invalid(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, RequestValidationError)
    message = validation_message(error.errors())
    log.info("http_invalid_request", path=request.url.path, reason=message)
    return _answer(ApiError("invalid_request", message))


async def _http(_request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, HTTPException)
    fallback: HttpErrorCode = "internal" if error.status_code >= 500 else "invalid_request"
    code = CODE_OF_STATUS.get(error.status_code, fallback)
    body = ErrorBody(code=code, message=str(error.detail))
    return JSONResponse(body.model_dump(), status_code=error.status_code, headers=error.headers)


async def _service(request: Request, failure: Exception) -> JSONResponse:
    error = service_error(failure)
    log.warning("http_service_failed", path=request.url.path, error=repr(failure))
    return _answer(error)


async def _internal(request: Request, failure: Exception) -> JSONResponse:
    # Starlette logs the traceback too (re-raised to the server); the caller learns no detail.
    log.error("http_internal_error", path=request.url.path, error=type(failure).__name__)
    return _answer(ApiError("internal", "memoryd failed on this request"))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every failure of ``app`` with an ``ErrorBody``."""
    app.add_exception_handler(Exception, _internal)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http)
    for failure in SERVICE_FAILURES:
        app.add_exception_handler(failure, _service)
