"""Unit tests for the MemoryOS parameters, vectors, serialisation and similarity ranking."""

# STYLE.md puts the expected value first in asserts, which SIM300 calls a Yoda condition.

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest
from pydantic import ValidationError

from memoryd.shared.domain.memoryos import (
    DEFAULT_PARAMS,
    DomainModel,
    MemoryOsParams,
    UtcDatetime,
    VectorField,
    as_utc,
    rank_by_similarity,
    unit_vector,
)


class Sample(DomainModel):
    """A state with every kind of field the serialisation contract covers."""

    name: str
    vector: VectorField
    at: UtcDatetime
    tags: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return self.name


T0 = datetime(2025, 1, 1, tzinfo=UTC)


def test_defaults_are_the_papers_parameters() -> None:
    """The default parameters are the values MemoryOS publishes."""
    expected = {
        "fifo_size": 7,
        "theta": 0.6,
        "max_segments": 200,
        "alpha": 1.0,
        "beta": 1.0,
        "gamma": 1.0,
        "mu": 1e7,
        "tau": 5.0,
        "top_m": 5,
        "top_k": 10,
        "knowledge_capacity": 100,
        "agent_traits_capacity": 100,
    }
    assert expected == DEFAULT_PARAMS.model_dump(include=set(expected))


def test_params_are_frozen() -> None:
    """Parameters cannot be changed once built."""
    with pytest.raises(ValidationError):
        DEFAULT_PARAMS.tau = 1.0  # type: ignore[misc]


def test_params_refuse_a_zero_time_constant() -> None:
    """A recency time constant of zero is refused instead of dividing by zero later."""
    with pytest.raises(ValidationError):
        MemoryOsParams(mu=0)


def test_unit_vector_has_length_one() -> None:
    """A vector is scaled to length one."""
    vector = unit_vector([3.0, 4.0])
    assert [0.6, 0.8] == pytest.approx(vector.tolist())
    assert np.float32 == vector.dtype


def test_unit_vector_keeps_zero_as_zero() -> None:
    """A zero vector stays zero instead of turning into NaN."""
    assert [0.0, 0.0] == unit_vector([0.0, 0.0]).tolist()


def test_unit_vector_refuses_a_matrix() -> None:
    """A two-dimensional array is refused."""
    with pytest.raises(ValueError, match="one-dimensional"):
        unit_vector([[1.0, 0.0]])


def test_vector_serialises_as_little_endian_float32_base64() -> None:
    """A vector is stored as base64 of its float32 little-endian bytes."""
    sample = Sample(name="a", vector=[1.0, 0.0], at=T0)
    assert "AACAPwAAAAA=" == sample.to_dict()["vector"]


def test_state_round_trips_through_dict_and_json() -> None:
    """A state loads back equal from its dict and from its JSON."""
    sample = Sample(name="a", vector=unit_vector([0.3, -0.2, 0.9]), at=T0, tags=("x", "y"))
    assert sample == Sample.from_dict(sample.to_dict())
    assert sample == Sample.from_json(sample.to_json())
    assert sample.vector.tolist() == Sample.from_json(sample.to_json()).vector.tolist()


def test_canonical_json_sorts_keys_without_spaces() -> None:
    """The canonical JSON has sorted keys and no whitespace, whatever the field order."""
    sample = Sample(name="a", vector=[1.0, 0.0], at=T0, tags=("t",))
    expected = '{"at":"2025-01-01T00:00:00Z","name":"a","tags":["t"],"vector":"AACAPwAAAAA="}'
    assert expected == sample.to_json()


def test_times_are_stored_in_utc() -> None:
    """The same instant given with another offset serialises identically."""
    paris = datetime(2025, 1, 1, 1, tzinfo=timezone(timedelta(hours=1)))
    assert Sample(name="a", vector=[1.0], at=T0).to_json() == (
        Sample(name="a", vector=[1.0], at=paris).to_json()
    )


def test_naive_times_are_refused() -> None:
    """A datetime without an offset is refused: its instant is unknown."""
    with pytest.raises(ValidationError):
        Sample(name="a", vector=[1.0], at=datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="aware"):
        as_utc(datetime(2025, 1, 1))


INFINITE_ON_THE_WIRE = base64.b64encode(np.array([1.0, np.inf], dtype="<f4").tobytes()).decode()


@pytest.mark.parametrize(
    "bad",
    [
        "not base64!",
        "AACAPw==AACAPw==",  # data after the padding
        [[1.0, 2.0]],
        [float("nan"), 1.0],
        [float("inf"), float("-inf")],
        INFINITE_ON_THE_WIRE,
    ],
    ids=["base64", "padding", "matrix", "nan", "infinities", "infinite-wire"],
)
def test_bad_vectors_are_refused(bad: object) -> None:
    """Malformed base64, a matrix or a component that is not finite fail validation."""
    with pytest.raises(ValidationError):
        Sample(name="a", vector=bad, at=T0)


def test_the_largest_finite_components_are_kept() -> None:
    """Components at float32's limit are finite, and kept as they are."""
    largest = float(np.finfo(np.float32).max)
    sample = Sample(name="a", vector=[largest, largest, -largest], at=T0)

    assert [largest, largest, -largest] == sample.vector.tolist()


def test_stored_vector_is_read_only_and_the_callers_is_not() -> None:
    """A state's vector cannot be mutated, and the array the caller passed stays writable."""
    mine = np.array([1.0, 0.0], dtype=np.float32)
    sample = Sample(name="a", vector=mine, at=T0)
    with pytest.raises(ValueError, match="read-only"):
        sample.vector[0] = 2.0
    mine[0] = 5.0
    assert [1.0, 0.0] == sample.vector.tolist()


def test_states_with_equal_vectors_are_equal_and_hash_alike() -> None:
    """Two states holding equal vectors compare equal and hash the same."""
    first = Sample(name="a", vector=[0.6, 0.8], at=T0)
    second = Sample(name="a", vector=np.array([0.6, 0.8]), at=T0)
    assert first == second
    assert hash(first) == hash(second)
    assert first != Sample(name="a", vector=[0.8, 0.6], at=T0)


def test_rank_by_similarity_orders_by_cosine_then_key() -> None:
    """Items come back most similar first; equal scores by key; at most top_k."""
    items = [
        Sample(name="far", vector=unit_vector([0.0, 1.0]), at=T0),
        Sample(name="near-b", vector=unit_vector([1.0, 0.0]), at=T0),
        Sample(name="mid", vector=unit_vector([0.6, 0.8]), at=T0),
        Sample(name="near-a", vector=unit_vector([1.0, 0.0]), at=T0),
    ]
    ranked = rank_by_similarity(unit_vector([1.0, 0.0]), items, top_k=3)
    assert ["near-a", "near-b", "mid"] == [entry.item.name for entry in ranked]
    assert [1.0, 1.0, 0.6] == pytest.approx([entry.score for entry in ranked])


def test_rank_by_similarity_of_nothing_is_empty() -> None:
    """No items, or top_k 0, rank to an empty list."""
    item = Sample(name="a", vector=[1.0], at=T0)
    assert [] == rank_by_similarity(unit_vector([1.0]), [], top_k=5)
    assert [] == rank_by_similarity(unit_vector([1.0]), [item], top_k=0)
