"""Every read model has exactly one owner: replay, verify and erasure are derived from it."""

from __future__ import annotations

from collections import Counter
from dataclasses import fields
from unittest.mock import sentinel

from memoryd.services.bootstrap import ALL_COMPONENTS, Retrieval, build_projections
from memoryd.shared.adapters.sql.tables import READ_MODELS
from memoryd.shared.settings import Settings


def test_each_read_model_is_owned_by_exactly_one_projection() -> None:
    """The projections' declared tables are the read models, each declared once."""
    ports = Retrieval(**{port.name: getattr(sentinel, port.name) for port in fields(Retrieval)})
    projections = build_projections(Settings(), ALL_COMPONENTS, ports)  # type: ignore[arg-type]

    owners = Counter(table.name for p in projections for table in p.tables)

    assert {table.name: 1 for table in READ_MODELS} == dict(owners)
    assert len(projections) == len({p.consumer for p in projections})
