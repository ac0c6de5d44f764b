"""Replicas' shares of a partitioned log: each holds ceil(partitions / members) of a group."""

from __future__ import annotations

from memoryd.services.runtime.leases import Moves, plan

STM = [f"memoryd-stm-p{p}" for p in range(4)]


def test_a_lone_member_takes_every_free_partition() -> None:
    """One replica runs the whole log."""
    assert Moves(take=tuple(STM)) == plan({"stm": STM}, set(), set(), {"stm": 1})


def test_a_member_over_its_share_gives_the_rest_back() -> None:
    """When a second replica joins, the first releases half, for the newcomer to take."""
    held = set(STM)

    assert Moves(release=tuple(STM[2:])) == plan({"stm": STM}, held, held, {"stm": 2})


def test_a_member_takes_only_free_partitions_up_to_its_share() -> None:
    """Partitions another member holds are left alone; the share counts what it holds."""
    taken = {STM[0], STM[1], STM[2]}

    assert Moves(take=(STM[3],)) == plan({"stm": STM}, set(), taken, {"stm": 2})
    assert Moves() == plan({"stm": STM}, {STM[3], STM[2]}, taken | {STM[3]}, {"stm": 2})


def test_a_dead_members_partitions_are_taken_once_its_leases_lapse() -> None:
    """With the other member gone (its membership and leases expired), the survivor takes all."""
    mine = {STM[0], STM[1]}

    assert Moves(take=(STM[2], STM[3])) == plan({"stm": STM}, mine, mine, {"stm": 1})


def test_groups_are_shared_each_on_their_own() -> None:
    """A replica running two projections takes its share of each."""
    gate = ["memoryd-gate"]
    moves = plan({"stm": STM, "gate": gate}, set(), {"memoryd-gate"}, {"stm": 2, "gate": 2})

    assert Moves(take=(STM[0], STM[1])) == moves
