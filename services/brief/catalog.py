"""The digest's data (``digest.yaml``): planets, section order, action wording, verb forms, link templates."""

from __future__ import annotations

import functools
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

_FILE = Path(__file__).with_name("digest.yaml")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Planet(_Frozen):
    area: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    label: str


class Links(_Frozen):
    approve: str
    ignore: str


class ActionWording(_Frozen):
    """How the Home names one action type: a card's label, the done list's counted phrase."""

    label: str
    done_one: str
    done: str = Field(pattern=r"\{n\}")

    def counted(self, count: int) -> str:
        return self.done_one if count == 1 else self.done.format(n=count)


class DigestCatalog(_Frozen):
    planets: tuple[Planet, ...]
    sections: tuple[str, ...]
    actions: dict[str, ActionWording] = Field(default_factory=dict)
    irregular_past: dict[str, str]
    links: dict[str, Links]
    promote_after_approvals: int = Field(ge=1)


@functools.cache
def load_catalog(path: Path = _FILE) -> DigestCatalog:
    """Parsed and validated once per process; a broken file fails at start-up, not mid-stream."""
    return DigestCatalog.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
