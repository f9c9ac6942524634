"""Release the current topic schemas: check, copy to ``schemas/released/``, bump the catalog.

    python -m switchboard.contracts.release --check     # what would change; exit 1 if blocked
    python -m switchboard.contracts.release             # release every changed schema
    python -m switchboard.contracts.release run_completed insights

A schema is released only when it is backward compatible with every version already
released for its topic (records of all of them may still be on the topic). Releasing
writes ``released/<topic>/v<N>.avsc`` and gives it the next free global schema id in
``catalog.json``. Released files are never edited afterwards.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from switchboard.contracts.compatibility import Incompatibility, check_backward_transitive
from switchboard.contracts.records import Record
from switchboard.contracts.registry import CatalogEntry, read_catalog, write_catalog
from switchboard.contracts.schemas import (
    CATALOG_FILE,
    RELEASED_DIR,
    fingerprint,
    load_schema_file,
    schemas_dir,
)
from switchboard.contracts.topics import TopicSpec, all_topics, topic_named


@dataclass(frozen=True, slots=True)
class ReleasePlan:
    """What releasing one topic would do."""

    topic: str
    next_version: int | None  # None: the current schema is already released
    problems: tuple[Incompatibility, ...]

    @property
    def blocked(self) -> bool:
        return bool(self.problems)


def plan_release(topic: TopicSpec[Record], directory: Path | None = None) -> ReleasePlan:
    """Compare a topic's current schema with its released versions."""
    directory = directory or schemas_dir()
    catalog_path = directory / CATALOG_FILE
    entries = read_catalog(catalog_path) if catalog_path.exists() else {}
    versions = entries.get(topic.subject, ())
    current = topic.load_schema(directory)
    if any(e.sha256 == fingerprint(current) for e in versions):
        return ReleasePlan(topic.name, None, ())
    released = [load_schema_file(directory / e.path) for e in versions]
    problems = check_backward_transitive(released, current, labels=[f"v{e.version}" for e in versions])
    next_version = max((e.version for e in versions), default=0) + 1
    return ReleasePlan(topic.name, next_version, tuple(problems))


def release(topics: list[TopicSpec[Record]], directory: Path | None = None) -> list[ReleasePlan]:
    """Release every given topic whose schema changed; refuses all if any is blocked."""
    directory = directory or schemas_dir()
    plans = [plan_release(t, directory) for t in topics]
    if any(p.blocked for p in plans):
        return plans
    catalog_path = directory / CATALOG_FILE
    entries = dict(read_catalog(catalog_path)) if catalog_path.exists() else {}
    next_id = max((e.schema_id for vs in entries.values() for e in vs), default=0) + 1
    for topic, plan in zip(topics, plans, strict=True):
        if plan.next_version is None:
            continue
        relative = f"{RELEASED_DIR}/{topic.name}/v{plan.next_version}.avsc"
        target = directory / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(topic.schema_path(directory), target)
        entry = CatalogEntry(
            subject=topic.subject,
            version=plan.next_version,
            schema_id=next_id,
            path=relative,
            sha256=fingerprint(load_schema_file(target)),
        )
        entries[topic.subject] = (*entries.get(topic.subject, ()), entry)
        next_id += 1
    order = [t.subject for t in all_topics()]
    ordered = {s: entries[s] for s in sorted(entries, key=lambda s: (order.index(s) if s in order else len(order), s))}
    write_catalog(catalog_path, ordered)
    return plans


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("topics", nargs="*", help="logical topic names (default: all)")
    parser.add_argument("--check", action="store_true", help="report only, change nothing")
    args = parser.parse_args(argv)
    topics = [topic_named(n) for n in args.topics] if args.topics else list(all_topics())
    plans = [plan_release(t) for t in topics] if args.check else release(topics)
    blocked = False
    for plan in plans:
        if plan.blocked:
            blocked = True
            print(f"{plan.topic}: NOT backward compatible, not released:")
            for problem in plan.problems:
                print(f"  - {problem}")
        elif plan.next_version is None:
            print(f"{plan.topic}: unchanged")
        else:
            verb = "would release" if args.check else "released"
            print(f"{plan.topic}: {verb} v{plan.next_version}")
    return 1 if blocked else 0


if __name__ == "__main__":
    sys.exit(main())
