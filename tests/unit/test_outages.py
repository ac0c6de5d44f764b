"""An outage is retried for as long as it lasts; a fault of the message counts toward parking."""

from __future__ import annotations

import nats.errors
import nats.js.errors
import pytest
from pydantic import BaseModel, ValidationError
from sqlalchemy import exc as sql_errors

from memoryd.shared.adapters.nats_log import PublishFailed
from memoryd.shared.adapters.outages import is_outage


class Strict(BaseModel):
    n: int


def _validation_error() -> ValidationError:
    try:
        Strict.model_validate({"n": "x"})
    except ValidationError as error:
        return error
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "error",
    [
        nats.js.errors.NoStreamResponseError(),
        nats.js.errors.ServiceUnavailableError(),
        nats.errors.NoRespondersError(),
        nats.errors.ConnectionClosedError(),
        PublishFailed("no acknowledgement"),
        ConnectionResetError(),
        sql_errors.OperationalError("SELECT 1", {}, Exception("terminating connection")),
        sql_errors.InterfaceError("SELECT 1", {}, Exception("connection is closed")),
    ],
)
def test_nats_or_the_database_away_is_an_outage(error: BaseException) -> None:
    assert is_outage(error)


def test_an_error_raised_from_an_outage_is_one() -> None:
    try:
        try:
            raise nats.js.errors.NoStreamResponseError
        except nats.js.errors.NoStreamResponseError as cause:
            raise RuntimeError("applying failed") from cause
    except RuntimeError as error:
        assert is_outage(error)


@pytest.mark.parametrize(
    "error",
    [
        ValueError("bad value"),
        KeyError("missing"),
        _validation_error(),
        sql_errors.IntegrityError("INSERT", {}, Exception("duplicate key")),
    ],
)
def test_a_fault_of_the_message_is_not_an_outage(error: BaseException) -> None:
    assert not is_outage(error)
