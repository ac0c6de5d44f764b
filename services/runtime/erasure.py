"""Fold ``user.erased`` in any projection: the user's rows go, then the rest of the batch folds.

A projection's read models are per user, so erasing a user first and folding the batch after
is the same as folding in log order, once the user's own events that came before their
erasure are left out: they describe what the erasure deletes. Leaving them out also keeps a
live worker from deciding (an LLM answer, a derived event) about a user it is erasing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncSession

from memoryd.services.runtime.projection import Effects, Positioned
from memoryd.shared.adapters.sql.owners import delete_owned
from memoryd.shared.contracts.events import UserErased

Fold = Callable[[AsyncSession, Sequence[Positioned], bool], Awaitable[Effects]]
Erase = Callable[[AsyncSession, UserErased], Awaitable[None]]
Owner = tuple[str, str]  # (tenant, user_id)


def owner_of(item: Positioned) -> Owner:
    """Return the (tenant, user) an event belongs to."""
    return (item.event.scope.tenant, item.event.scope.user_id)


def after_erasures(batch: Sequence[Positioned]) -> tuple[list[UserErased], list[Positioned]]:
    """Split a batch into the erasures it holds (the last per user) and what still folds.

    What still folds is every event that is not an erasure and does not belong to a user
    erased later in the batch, in log order.
    """
    erased_at = {owner_of(i): i.sequence for i in batch if isinstance(i.event, UserErased)}
    erasures = [
        i.event
        for i in batch
        if isinstance(i.event, UserErased) and i.sequence == erased_at[owner_of(i)]
    ]
    kept = [
        i
        for i in batch
        if not isinstance(i.event, UserErased) and i.sequence > erased_at.get(owner_of(i), 0)
    ]
    return erasures, kept


async def fold_with_erasures(
    session: AsyncSession, batch: Sequence[Positioned], live: bool, fold: Fold, erase: Erase
) -> Effects:
    """Erase the users the batch erases, then fold what is left of it (``after_erasures``)."""
    erasures, kept = after_erasures(batch)
    for event in erasures:
        await erase(session, event)
    return await fold(session, kept, live) if kept else Effects()


def erase_rows(tables: Sequence[Table]) -> Erase:
    """Return the erasure of a projection whose only state is its rows in ``tables``."""

    async def erase(session: AsyncSession, event: UserErased) -> None:
        await delete_owned(session, tables, event.scope.tenant, event.scope.user_id)

    return erase
