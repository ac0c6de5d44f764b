"""Tests for the mapping between the index port and what the Qdrant adapters store."""

from uuid import uuid4

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.shared.adapters.index._mapping import (
    MOST_ASKED,
    best_first,
    dense_bytes,
    dense_values,
    hit_from_stored,
    more_needed,
    runs_of_equal,
    scope_conditions,
    stored_payload,
)
from memoryd.shared.adapters.index.port import IndexPayload, IndexPoint, ScopeFilter
from memoryd.shared.adapters.index.sparse import encoding
from memoryd.shared.adapters.index.stored import DIGEST_KEY, InRange, MatchAny

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
    stored = stored_payload(point, encoding())
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
    digest: str = stored_payload(point, encoding(avg_len))[DIGEST_KEY]
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


@pytest.mark.parametrize(
    ("scores", "limit", "asked", "needed"),
    [
        ([3.0, 2.0, 1.0], 2, 3, False),  # the cut falls between different scores
        ([3.0, 2.0, 2.0], 2, 3, True),  # a tie runs across the cut and maybe further
        ([2.0, 2.0, 2.0, 1.0], 2, 4, False),  # the tie ends inside the reply: all of it is here
        ([2.0, 2.0], 2, 3, False),  # fewer points than asked: the engine holds no more
        ([2.0] * MOST_ASKED, 2, MOST_ASKED, False),  # asked enough: the cut stays where it is
        ([], 0, 1, False),
    ],
)
def test_more_needed_only_while_a_tie_may_run_past_the_reply(
    scores: list[float], limit: int, asked: int, needed: bool
) -> None:
    assert needed is more_needed(scores, limit, asked)


def test_scores_a_few_last_places_apart_are_one_run_and_farther_ones_are_not() -> None:
    noisy = 14.4735 * (1 - 2e-7)  # one score as two builds of the engine summed it
    assert [0, 0, 1, 2, 2] == runs_of_equal([14.4735, noisy, 14.47, 9.0, 9.0])


def test_more_needed_when_the_cut_and_the_reply_end_lie_in_one_run() -> None:
    assert more_needed([3.0, 2.0 * (1 + 1e-7), 2.0], 2, 3)


_scores = st.sampled_from([0.5, 1.0, 1.0 * (1 - 1e-7), 2.0])


@given(st.lists(st.tuples(st.uuids(), _scores, st.none()), unique_by=lambda t: t[0]))
def test_best_first_is_the_same_whatever_the_order_it_is_given(
    scored: list[tuple[object, float, None]],
) -> None:
    """Ties, and scores a last place apart, come by id; each keeps its run's best score."""
    limit = 5
    kept = best_first(scored, limit)
    assert kept == best_first(list(reversed(scored)), limit)
    best_of_run = 1.0 if any(score == 1.0 for _, score, _ in scored) else 1.0 * (1 - 1e-7)
    equal = [
        (point_id, best_of_run if 0.99 < score <= 1.0 else score, payload)
        for point_id, score, payload in scored
    ]
    assert kept == sorted(equal, key=lambda item: (-item[1], item[0]))[:limit]


def test_dense_bytes_are_the_float32_values_the_engine_is_given() -> None:
    vector = np.array([0.5, -0.25, 3.0], dtype=np.float64)
    packed = dense_bytes(vector, 3)
    assert np.frombuffer(packed, dtype=np.float32).tolist() == [0.5, -0.25, 3.0]
    assert dense_bytes([0.5, -0.25, 3.0], 3) == packed
    with pytest.raises(ValueError, match="shape"):
        dense_bytes([1.0, 2.0], 3)
    with pytest.raises(ValueError, match="NaN"):
        dense_bytes([1.0, float("inf"), 0.0], 3)
