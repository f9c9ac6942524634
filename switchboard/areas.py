"""The business areas ("planets") autonomy is set for [000 §3], read from ``catalog/areas.yaml``.

The list is data shared by the runner (which area a write tool acts in), the API
(autonomy settings per area) and the brief; no service keeps its own copy.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Final

import yaml

_SLUG = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
CROSS: Final = "cross"


@dataclass(frozen=True, slots=True)
class Area:
    slug: str
    label: str


@functools.cache
def areas() -> tuple[Area, ...]:
    """Every area in catalog order; the YAML is validated once (a bad slug is a packaging bug)."""
    raw = yaml.safe_load(resources.files("switchboard.catalog").joinpath("areas.yaml").read_text(encoding="utf-8"))
    found = tuple(Area(slug=str(item["slug"]), label=str(item.get("label") or item["slug"])) for item in raw["areas"])
    slugs = [a.slug for a in found]
    if len(set(slugs)) != len(slugs) or not all(_SLUG.match(s) for s in slugs) or CROSS not in slugs:
        raise ValueError("switchboard/catalog/areas.yaml: slugs must be unique, well formed and include 'cross'")
    return found


def area_slugs() -> tuple[str, ...]:
    return tuple(a.slug for a in areas())


def is_area(slug: str) -> bool:
    return slug in area_slugs()
