"""Tests for the mapping between the index port and what the Qdrant adapters store."""

from uuid import uuid4

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.shared.adapters.index._mapping import (
    DIGEST_KEY,
    InRange,
    MatchAny,
    dense_values,
    hit_from_stored,
    scope_conditions,
    stored_payload,
)
from memoryd.shared.adapters.index.port import IndexPayload, IndexPoint, ScopeFilter
from memoryd.shared.adapters.index.sparse import document_vector

_names = st.none() | st.text(min_size=1, max_size=5)
_scopes = st.builds(
    ScopeFilter,
    tenant=st.text(min_size=1, max_size=5),
    user_id=_names,
    agent_id=_names,
    session_id=_names,
    namespace=_names,
    kinds=st.none() | st.lists(st.sampled_from(["turn", "fact"]), min_size=1).map(tuple),
    occurred_after=st.none() | st.floats(0, 1e9),
)


@given(_scopes)
def test_every_scope_starts_with_its_tenant(scope: ScopeFilter) -> None:
    """Whatever else a scope says, its first condition pins the tenant."""
    expected = MatchAny("tenant", (scope.tenant,))
    assert expected == scope_conditions(scope)[0]


def test_tenant_only_scope_has_one_condition() -> None:
    """The "global" scope (whole tenant) filters on the tenant alone."""
    expected = (MatchAny("tenant", ("acme",)),)
    assert expected == scope_conditions(ScopeFilter(tenant="acme"))


def test_full_scope_lists_every_condition() -> None:
    """Every field a scope sets becomes a condition, the time window half-open."""
    scope = ScopeFilter(
        tenant="acme",
        user_id="ann",
        agent_id="bot",
        session_id="s1",
        namespace="work",
        kinds=("turn", "fact"),
        categories=("core",),
        memory_types=("semantic",),
        occurred_after=10.0,
        occurred_before=20.0,
    )
    expected = (
        MatchAny("tenant", ("acme",)),
        MatchAny("user_id", ("ann",)),
        MatchAny("agent_id", ("bot",)),
        MatchAny("session_id", ("s1",)),
        MatchAny("namespace", ("work",)),
        MatchAny("kind", ("turn", "fact")),
        MatchAny("category", ("core",)),
        MatchAny("memory_type", ("semantic",)),
        InRange("occurred_at", 10.0, 20.0),
    )
    assert expected == scope_conditions(scope)


def test_stored_payload_round_trips_into_a_hit() -> None:
    """What an adapter stores comes back as the same payload and text."""
    payload = IndexPayload(
        tenant="acme",
        user_id="ann",
        kind="memory",
        category="core",
        importance=0.9,
        evergreen=True,
        occurred_at=1.5,
        source_event_id=uuid4(),
        extra={"key": "coffee", "tags": ["a", "b"]},
    )
    point = IndexPoint(id=uuid4(), dense=[1.0, 0.0], text="likes coffee", payload=payload)
    stored = stored_payload(point, document_vector(point.text))
    hit = hit_from_stored(str(point.id), 0.5, stored)
    expected = (point.id, payload, "likes coffee")
    assert expected == (hit.id, hit.payload, hit.text)


def test_dense_values_convert_numpy_to_floats() -> None:
    """A float64 numpy vector becomes a plain list of Python floats."""
    expected = [0.5, 0.25]
    values = dense_values(np.array([0.5, 0.25]), 2)
    assert expected == values
    assert all(type(value) is float for value in values)


def test_dense_values_refuse_wrong_dimension() -> None:
    """A vector of the wrong size is refused before it reaches the engine."""
    with pytest.raises(ValueError, match="shape"):
        dense_values([1.0, 2.0, 3.0], 2)


def test_dense_values_refuse_nan() -> None:
    """A NaN in a vector is refused: it would poison every cosine score."""
    with pytest.raises(ValueError, match="NaN"):
        dense_values([1.0, float("nan")], 2)


def _digest(point: IndexPoint, avg_len: float = 100.0) -> str:
    digest: str = stored_payload(point, document_vector(point.text, avg_len))[DIGEST_KEY]
    return digest


def test_the_digest_changes_with_anything_a_point_stores() -> None:
    """Payload, text, dense vector and BM25 encoding each change it; an equal point does not."""
    payload = IndexPayload(tenant="acme", user_id="ann", kind="turn", occurred_at=1.0)
    point = IndexPoint(id=uuid4(), dense=np.array([0.6, 0.8]), text="likes tea", payload=payload)
    variants = [
        point.model_copy(update={"text": "likes green tea"}),
        point.model_copy(update={"dense": [0.8, 0.6]}),
        point.model_copy(update={"payload": payload.model_copy(update={"importance": 0.9})}),
    ]
    same = point.model_copy(update={"dense": [0.6, 0.8]})  # a list of the same float32 values

    assert _digest(point) == _digest(same)
    assert len({_digest(point), *map(_digest, variants), _digest(point, 10.0)}) == 5
