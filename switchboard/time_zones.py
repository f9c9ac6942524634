"""IANA time zone names, checked in one place for the API and loaded safely by the workers.

``ZoneInfo(name)`` reads a file named by the caller, so a bad name does not always raise
``ZoneInfoNotFoundError``: ``"America"`` is a directory (``IsADirectoryError``), ``"../x"``, ``""``
or a NUL byte are ``ValueError``, ``"zone.tab"`` is not a TZif file (``ValueError``), a long name
is ``OSError``. The API stores only names that load (a 422 otherwise, never a 500), and a worker
that meets a bad stored name (e.g. one written before this check) gets ``None``, never a crash.
"""

from __future__ import annotations

import re
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# Longer than any IANA name ("America/Argentina/ComodRivadavia" is 32).
MAX_TIME_ZONE_LENGTH: Final = 64
# IANA names are ``/``-separated parts of letters, digits, ``_``, ``-`` and ``+`` ("Etc/GMT+3"):
# no dots, empty parts or absolute paths, so nothing but a zone file is ever opened.
_SHAPE: Final = re.compile(r"[A-Za-z0-9_+-]+(?:/[A-Za-z0-9_+-]+)*")


def load_time_zone(name: str) -> ZoneInfo | None:
    """The zone ``name`` names, or ``None`` for anything that is not one (whatever ``ZoneInfo`` raises)."""
    if len(name) > MAX_TIME_ZONE_LENGTH or not _SHAPE.fullmatch(name):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def check_time_zone(value: str) -> str:
    """``value`` if it names an IANA zone; ``ValueError`` otherwise (a pydantic validator's 422)."""
    if load_time_zone(value) is None:
        raise ValueError(f"{value!r} is not an IANA time zone (e.g. America/Sao_Paulo)")
    return value
