"""Dates a query implies ("two weeks ago", "last month"), reckoned from the request's now.

A question about "the cake I baked a couple of days ago" is about the turns of two days
before it was asked: recall ranks the items near that date as one more (weak) stream. Each
expression comes with a tolerance that grows with the distance, as people round: "3 weeks ago"
may be 17 or 25 days back, "yesterday" is a day or two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = ["ImpliedDate", "implied_date"]

_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 4,
}
_DAYS = {"day": 1.0, "week": 7.0, "month": 30.4, "year": 365.0}
_COUNT = r"(\d{1,3}|" + "|".join(sorted(map(re.escape, _NUMBERS), key=len, reverse=True)) + ")"
_AGO = re.compile(rf"\b{_COUNT}\s+(day|week|month|year)s?\s+ago\b", re.IGNORECASE)
_LAST = re.compile(r"\b(?:last|past|previous)\s+(weekend|week|month|year)\b", re.IGNORECASE)
_YESTERDAY = re.compile(r"\byesterday\b", re.IGNORECASE)
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_LAST_WEEKDAY = re.compile(rf"\blast\s+({'|'.join(_WEEKDAYS)})\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class ImpliedDate:
    """The date a query points at, and how far from it an item may lie and still count."""

    at: datetime
    tolerance: timedelta

    def distance_days(self, when: datetime) -> float | None:
        """Return how many days ``when`` lies from the date, or None beyond the tolerance."""
        gap = abs(when - self.at)
        return gap.total_seconds() / 86_400 if gap <= self.tolerance else None


def _days_back(days: float) -> timedelta:
    # Rounded talk: a day either side for short spans, a third of the span for longer ones.
    return timedelta(days=max(1.5, days / 3))


def implied_date(query: str, now: datetime) -> ImpliedDate | None:
    """Return the date a relative time expression in the query implies, if it has one."""
    ago = _AGO.search(query)
    if ago:
        count = ago.group(1).lower()
        days = (int(count) if count.isdigit() else _NUMBERS[count]) * _DAYS[ago.group(2).lower()]
        return ImpliedDate(now - timedelta(days=days), _days_back(days))
    weekday = _LAST_WEEKDAY.search(query)
    if weekday:
        back = (now.weekday() - _WEEKDAYS.index(weekday.group(1).lower())) % 7 or 7
        return ImpliedDate(now - timedelta(days=back), timedelta(days=1.5))
    last = _LAST.search(query)
    if last:
        unit = last.group(1).lower()
        if unit == "weekend":
            # The Saturday-Sunday before now (the weekend just gone, if today is one).
            back = (now.weekday() - 5) % 7 or 7
            return ImpliedDate(now - timedelta(days=back - 0.5), timedelta(days=2))
        days = _DAYS[unit]
        return ImpliedDate(now - timedelta(days=days), _days_back(days))
    if _YESTERDAY.search(query):
        return ImpliedDate(now - timedelta(days=1), timedelta(days=1.5))
    return None
