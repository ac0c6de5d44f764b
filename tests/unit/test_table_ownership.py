"""Every read model has exactly one owner: replay, verify and erasure are derived from it."""

from __future__ import annotations

from collections import Counter
from dataclasses import fields
from unittest.mock import sentinel

from memoryd.services.bootstrap import ALL_COMPONENTS, Retrieval, build_projections
from memoryd.services.runtime.projection import Projection
from memoryd.shared.adapters.sql.tables import READ_MODELS
from memoryd.shared.contracts import UserErased
from memoryd.shared.settings import Settings


def all_projections() -> list[Projection]:
    """Return every projection ``memoryd up`` runs (its ports are placeholders: never called)."""
    ports = Retrieval(**{port.name: getattr(sentinel, port.name) for port in fields(Retrieval)})
    return build_projections(Settings(), ALL_COMPONENTS, ports)  # type: ignore[arg-type]


def test_each_read_model_is_owned_by_exactly_one_projection() -> None:
    """The projections' declared tables are the read models, each declared once."""
    projections = all_projections()

    owners = Counter(table.name for p in projections for table in p.tables)

    assert {table.name: 1 for table in READ_MODELS} == dict(owners)
    assert len(projections) == len({p.consumer for p in projections})


def test_every_read_model_names_the_owner_of_each_row() -> None:
    """Erasure deletes a user's rows by tenant and user: every read model has both columns."""
    lacking = [t.name for t in READ_MODELS if not {"tenant", "user_id"} <= set(t.columns.keys())]

    assert [] == lacking


def test_every_projection_folds_an_erasure() -> None:
    """No projection that holds read models skips ``user.erased``: each deletes what it holds
    of the user (the gate holds nothing)."""
    assert [] == [p.consumer for p in all_projections() if p.tables and UserErased not in p.folds]
