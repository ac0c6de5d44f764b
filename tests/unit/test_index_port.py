"""Tests for the search-index port's models."""

from uuid import uuid4

import numpy as np
import pytest
from pydantic import ValidationError

from memoryd.shared.adapters.index.port import IndexPayload, IndexPoint, ScopeFilter


def _payload(**overrides: object) -> IndexPayload:
    """Return a valid payload with the given fields changed."""
    fields: dict[str, object] = {"tenant": "acme", "kind": "turn", "occurred_at": 0.0}
    return IndexPayload.model_validate(fields | overrides)


def test_scope_without_tenant_is_refused() -> None:
    """A scope cannot be built without a tenant, so no search can span tenants."""
    with pytest.raises(ValidationError, match="tenant"):
        ScopeFilter.model_validate({"user_id": "ann"})


def test_scope_with_empty_tenant_is_refused() -> None:
    """An empty tenant is refused rather than treated as a wildcard."""
    with pytest.raises(ValidationError, match="tenant"):
        ScopeFilter(tenant="")


def test_scope_with_empty_kinds_is_refused() -> None:
    """An empty kinds tuple is refused: it would be ambiguous between "none" and "any"."""
    with pytest.raises(ValidationError, match="kinds"):
        ScopeFilter(tenant="acme", kinds=())


def test_scope_is_immutable() -> None:
    """A scope cannot be widened after it is built."""
    scope = ScopeFilter(tenant="acme", user_id="ann")
    with pytest.raises(ValidationError):
        scope.user_id = None  # type: ignore[misc]


def test_payload_refuses_unknown_kind() -> None:
    """Only the five item kinds are accepted."""
    with pytest.raises(ValidationError, match="kind"):
        _payload(kind="tweet")


def test_payload_refuses_importance_above_one() -> None:
    """Importance is bounded to 0..1."""
    with pytest.raises(ValidationError, match="importance"):
        _payload(importance=1.5)


def test_payload_refuses_unknown_field() -> None:
    """A misspelled field is an error, not silently dropped data."""
    with pytest.raises(ValidationError, match="tennant"):
        _payload(tennant="acme")


def test_point_accepts_a_numpy_vector() -> None:
    """An embedding straight from the model (a numpy array) is a valid dense vector."""
    vector = np.ones(4, dtype=np.float32)
    point = IndexPoint(id=uuid4(), dense=vector, text="hi", payload=_payload())
    assert vector is point.dense
