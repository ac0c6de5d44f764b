"""Failures of memoryd answer with the recall codes and the statuses they mean."""

from __future__ import annotations

import pytest
from nats.errors import NoRespondersError

from memoryd.services.http.errors import ApiError, service_error, validation_message
from memoryd.shared.adapters.nats_log import PublishFailed
from memoryd.shared.client import ListMemoriesFailed, RecallFailed, RecallOverloaded
from memoryd.shared.contracts.memories import ListMemoriesError
from memoryd.shared.contracts.recall import RecallError


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (RecallOverloaded(RecallError(code="overloaded", message="full")), (503, "overloaded")),
        (
            RecallFailed(RecallError(code="deadline_exceeded", message="x")),
            (504, "deadline_exceeded"),
        ),
        (RecallFailed(RecallError(code="invalid_request", message="x")), (422, "invalid_request")),
        (ListMemoriesFailed(ListMemoriesError(code="forbidden", message="x")), (403, "forbidden")),
        (NoRespondersError(), (503, "unavailable")),
        (PublishFailed("no ack"), (503, "unavailable")),
        (TimeoutError(), (504, "deadline_exceeded")),
    ],
)
def test_a_service_failure_has_its_code_and_status(
    failure: Exception, expected: tuple[int, str]
) -> None:
    """The recall service's codes pass through; no responders and a lost log are 503."""
    error = service_error(failure)

    assert expected == (error.status, error.body.code)


def test_a_validation_error_names_the_field_without_where_it_was_sent() -> None:
    """FastAPI's location (body, query) is left out: the field's name is what a caller fixes."""
    errors = [
        {"loc": ("body", "max_tokens"), "msg": "Input should be greater than or equal to 1"},
        {"loc": ("query", "limit"), "msg": "Input should be a valid integer"},
    ]

    assert (
        "max_tokens: Input should be greater than or equal to 1; "
        "limit: Input should be a valid integer"
    ) == validation_message(errors)


def test_an_unauthorised_error_carries_its_challenge() -> None:
    """An error keeps the headers it is answered with."""
    error = ApiError("unauthorized", "unknown bearer token", {"WWW-Authenticate": "Bearer"})

    assert (401, {"WWW-Authenticate": "Bearer"}) == (error.status, error.headers)
