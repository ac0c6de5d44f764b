"""Unit tests of the dates a query implies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memoryd.services.recall.dates import implied_date

ASKED = datetime(2023, 5, 30, 21, 0, tzinfo=UTC)  # a Tuesday


@pytest.mark.parametrize(
    ("query", "days_back"),
    [
        ("What did I cook a couple of days ago?", 2),
        ("Which museum did I visit 3 weeks ago?", 21),
        ("What did I buy two months ago?", 60.8),
        ("Who did I meet yesterday?", 1),
        ("What did I bake last week?", 7),
        ("What did I do last Sunday?", 2),
    ],
)
def test_relative_expressions_point_back_from_the_question_date(
    query: str, days_back: float
) -> None:
    """Each expression lands the stated number of days before the question was asked."""
    found = implied_date(query, ASKED)
    assert found is not None
    assert ASKED - timedelta(days=days_back) == found.at


def test_last_weekend_points_at_the_weekend_just_gone() -> None:
    """Asked on a Tuesday, "last weekend" covers the Saturday and Sunday before it."""
    found = implied_date("What game did I beat last weekend?", ASKED)
    assert found is not None
    assert found.distance_days(datetime(2023, 5, 27, 12, tzinfo=UTC)) is not None
    assert found.distance_days(datetime(2023, 5, 20, 12, tzinfo=UTC)) is None


def test_the_tolerance_grows_with_the_distance() -> None:
    """Five days off counts for "3 weeks ago" but not for "2 days ago"."""
    three_weeks = implied_date("3 weeks ago", ASKED)
    two_days = implied_date("2 days ago", ASKED)
    assert three_weeks is not None and two_days is not None
    assert three_weeks.distance_days(three_weeks.at + timedelta(days=5)) is not None
    assert two_days.distance_days(two_days.at + timedelta(days=5)) is None


def test_a_query_with_no_relative_time_implies_no_date() -> None:
    """Plain questions, and how-long questions, have no date prior."""
    assert implied_date("Where do I work?", ASKED) is None
    assert implied_date("How many days did my trip last?", ASKED) is None
