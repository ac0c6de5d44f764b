"""The gate: a consumer of the whole log that folds nothing.

Every projection's consumer reads only the event types it folds, so an event no projection
folds would reach no worker: a type this version does not know (a newer publisher's), or a
subject of another shape. The gate reads every subject; its runner decodes only those (the
known types it passes over), so they are dead-lettered with their reason, never dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared import subjects
from memoryd.shared.contracts.events import Event


class GateProjection:
    """Read the whole log; fold nothing (the runner parks what no projection can read)."""

    consumer = subjects.GATE_CONSUMER
    folds: frozenset[type[Event]] = frozenset()
    decides: frozenset[type[Event]] = frozenset()
    tables: tuple[Table, ...] = ()

    async def apply(
        self, session: AsyncSession, batch: Sequence[Positioned], live: bool
    ) -> Effects:
        """Fold nothing: the gate only moves its position."""
        return Effects()
