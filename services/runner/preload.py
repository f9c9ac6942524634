"""Context a run reads with its subject, in one statement, instead of one transaction per reader.

Every reader of per-run context (the conversation mode, the state note, long-term facts,
the autonomy settings) used to open a tenant transaction of its own: four round trips of
transaction overhead (checkout, ``BEGIN``, the tenant setting, ``COMMIT``) around a
one-row query, five times per run — measured, the database work was four fifths of the
runner's CPU. Now a reader also offers a :class:`Preload`: one SQL column (a scalar
subquery) that ``RunStore.claim`` adds to the query loading the run's subject, and a
``parse`` of what it returned. The claim keeps each parsed value in
``RunSubject.preloaded`` under the preload's ``key``; the reader takes it from there
(:func:`read_once`) and queries the database itself only when the subject carries none —
a subject built elsewhere (tests, sub-agents) or a run the preload does not cover.

A preload's SQL may use the subject query's parameters (``:org_id``, ``:run_id``,
``:agent_id``, ``:version_id``, ``:conversation_id``, ``:contact_id``), its aliases ``v``
(the version row) and ``c`` (the conversation row, NULL columns when there is none), and
parameters of its own from :meth:`Preload.params`, whose names start with its key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, TypeVar, cast

from services.runner.subject import RunSubject
from switchboard.contracts import RunRequested

# What ``parse`` returns when the run is not covered (the reader then reads alone).
MISSING: Final = object()
T = TypeVar("T")


class Preload(Protocol):
    """One column of the claim's subject query and how to read it."""

    key: str
    sql: str

    def params(self, request: RunRequested) -> Mapping[str, Any]:
        """Bind parameters of ``sql`` beyond the subject query's own."""
        ...

    def parse(self, value: Any, subject: RunSubject) -> object:
        """The reader's value from the column's, or :data:`MISSING`."""
        ...


def preloaded(subject: RunSubject, key: str) -> object:
    """The value a preload read for ``key``, else :data:`MISSING`."""
    return subject.preloaded.get(key, MISSING)


async def read_once(subject: RunSubject, key: str, read: Callable[[], Awaitable[T]]) -> T:
    """The preloaded value for ``key``, else what ``read`` (the reader's own transaction) returns."""
    value = preloaded(subject, key)
    return cast(T, value) if value is not MISSING else await read()
