"""Re-expressing CF time values in another file's units."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from icechunk_spark import InvalidInputError
from icechunk_spark.virtual.time_units import parse_time_units, rebase_time_values


@pytest.mark.parametrize(
    ("units", "step", "reference"),
    [
        ("days since 2024-03-01", 86_400.0, datetime(2024, 3, 1, tzinfo=UTC)),
        ("hours since 2000-1-1 6:00", 3_600.0, datetime(2000, 1, 1, 6, tzinfo=UTC)),
        ("seconds since 1970-01-01T00:00:00Z", 1.0, datetime(1970, 1, 1, tzinfo=UTC)),
        ("minutes since 2010-05-02 00:00:30.5", 60.0, datetime(2010, 5, 2, 0, 0, 30, 500_000, UTC)),
    ],
)
def test_units_are_parsed(units: str, step: float, reference: datetime) -> None:
    assert parse_time_units(units) == (step, reference)


def test_daily_files_each_with_their_own_reference_date() -> None:
    day3 = rebase_time_values(
        np.array([0, 1], np.int64), "days since 2024-03-03", "days since 2024-03-01", None, "/t"
    )
    assert day3.tolist() == [2, 3] and day3.dtype == np.int64
    hours = rebase_time_values(
        np.array([6.0, 12.0]), "hours since 2024-03-02", "days since 2024-03-01", "standard", "/t"
    )
    assert hours.tolist() == [1.25, 1.5]


def test_what_cannot_be_converted_exactly_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="not whole numbers"):
        rebase_time_values(
            np.array([6], np.int64), "hours since 2024-03-02", "days since 2024-03-01", None, "/t"
        )
    with pytest.raises(InvalidInputError, match="only Gregorian calendars"):
        rebase_time_values(
            np.array([0]), "days since 2024-03-02", "days since 2024-03-01", "noleap", "/t"
        )
    with pytest.raises(InvalidInputError, match="straddle the Julian"):
        rebase_time_values(
            np.array([0]), "days since 1500-01-01", "days since 2000-01-01", "standard", "/t"
        )
    with pytest.raises(InvalidInputError, match="cannot read CF time units"):
        parse_time_units("fortnights since the flood")
