"""A time zone name is client input that ``ZoneInfo`` turns into a file path: every bad name is
refused (a 422 at the API) or ignored (the workers), whatever ``ZoneInfo`` would raise for it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.dispatcher.selection import in_business_hours
from switchboard.db.daily_brief import zone
from switchboard.time_zones import check_time_zone, load_time_zone
from tests.unit.dispatcher.builders import business_hours

BAD_NAMES = [
    pytest.param("America", id="directory"),  # IsADirectoryError
    pytest.param("America/Argentina", id="nested-directory"),
    pytest.param("../x", id="parent"),
    pytest.param("", id="empty"),
    pytest.param("UTC\x00", id="nul"),
    pytest.param("/etc/passwd", id="absolute"),
    pytest.param("Europe/", id="trailing-slash"),
    pytest.param("zone.tab", id="not-a-tzif-file"),
    pytest.param("a" * 5000, id="too-long"),  # OSError: file name too long
    pytest.param("\udc80", id="lone-surrogate"),
    pytest.param("Mars/Olympus", id="unknown"),
]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_a_bad_name_is_a_value_error_and_loads_as_none(name: str) -> None:
    assert load_time_zone(name) is None
    with pytest.raises(ValueError, match="not an IANA time zone"):
        check_time_zone(name)


@pytest.mark.parametrize("name", ["UTC", "America/Sao_Paulo", "America/Argentina/Buenos_Aires", "Etc/GMT+3"])
def test_real_zones_load(name: str) -> None:
    assert check_time_zone(name) == name
    loaded = load_time_zone(name)
    assert loaded is not None and loaded.key == name


@pytest.mark.parametrize("name", BAD_NAMES)
def test_workers_meeting_a_bad_stored_name_do_not_crash(name: str) -> None:
    hours = business_hours(name, ("monday", 0, 1440))
    assert not in_business_hours(hours, datetime(2026, 3, 9, 12, tzinfo=UTC))  # a Monday
    assert zone(name).key == "UTC"
