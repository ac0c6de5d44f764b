"""Folding ``user.erased``: the user's earlier events in the batch never fold, later ones do."""

from __future__ import annotations

from datetime import UTC, datetime

from memoryd.services.runtime.erasure import after_erasures
from memoryd.services.runtime.projection import Positioned
from memoryd.shared.contracts import Scope, TurnRecorded, UserErased

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
ALICE = Scope(tenant="acme", user_id="alice")
BOB = Scope(tenant="acme", user_id="bob")
OTHER_ALICE = Scope(tenant="globex", user_id="alice")


def turn(scope: Scope, sequence: int) -> Positioned:
    return Positioned(
        TurnRecorded(occurred_at=T0, scope=scope, query=f"q{sequence}", response="r"), sequence
    )


def erased(scope: Scope, sequence: int) -> Positioned:
    return Positioned(UserErased(occurred_at=T0, scope=scope), sequence)


def test_a_batch_without_erasures_folds_whole() -> None:
    """Nothing is erased and every event folds, in order."""
    batch = [turn(ALICE, 1), turn(BOB, 2)]

    erasures, kept = after_erasures(batch)

    assert [] == erasures
    assert batch == kept


def test_the_users_events_before_the_erasure_are_left_out() -> None:
    """Alice's turns before her erasure go; hers after it, bob's and another tenant's stay."""
    batch = [
        turn(ALICE, 1),
        turn(BOB, 2),
        turn(OTHER_ALICE, 3),
        erased(ALICE, 4),
        turn(ALICE, 5),
        turn(BOB, 6),
    ]

    erasures, kept = after_erasures(batch)

    assert [batch[3].event] == erasures
    assert [2, 3, 5, 6] == [item.sequence for item in kept]


def test_two_erasures_of_one_user_erase_once_after_the_last() -> None:
    """Only the last erasure of a user counts: what came between the two is left out too."""
    batch = [erased(ALICE, 1), turn(ALICE, 2), erased(ALICE, 3), turn(ALICE, 4)]

    erasures, kept = after_erasures(batch)

    assert [batch[2].event] == erasures
    assert [4] == [item.sequence for item in kept]
