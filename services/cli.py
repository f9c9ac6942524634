"""``switchboard``: the operator's single entry point.

    switchboard api|dispatcher|runner|notifier|brief   run one service in the foreground
    switchboard outbox-relay                            publish the transactional outbox to Kafka (one active per DB)
    switchboard mcp                                     the internal MCP tool server alone (the API mounts it too)
    switchboard migrate [--revision REV] [--downgrade] [--wait SECONDS]  apply database migrations (owner role)
    switchboard topics create [--wait SECONDS]          create every registered topic (idempotent)
    switchboard topics list                              show the registry and what the broker has
    switchboard dead-letters list [--topic T] [--code C] what failed, one JSON object per line
    switchboard dead-letters replay POSITION... | --all  send fixed records back to their topic (JSON report)
    switchboard admin bootstrap --org NAME --email EMAIL create an org, its admin and an admin token (JSON)
    switchboard admin new-key --id ID                    print a new entry for SWITCHBOARD_ENCRYPTION_KEYS
    switchboard admin rotate-keys [--dry-run]            re-encrypt every stored secret under the primary key (JSON)

Each service is imported only when asked for, so ``switchboard migrate`` never
loads the runner's provider SDKs and one broken service cannot stop the others' CLI.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

SERVICES = ("api", "dispatcher", "runner", "notifier", "brief")


def _run_service(name: str) -> int:
    module = importlib.import_module(f"services.{name}.__main__")
    module.main()
    return 0


def _outbox_relay() -> int:
    """The relay as its own process; the API also runs one unless ``API_OUTBOX_RELAY=false``."""
    from switchboard.kafka.outbox_relay import OutboxRelay, OutboxRelaySettings
    from switchboard.lifecycle import run_service

    settings = OutboxRelaySettings()
    relay = OutboxRelay(settings)
    run_service("outbox-relay", relay.run, settings, readiness=relay.ready)
    return 0


def _mcp() -> int:
    """The MCP tool server as its own process, at /internal/mcp; the API serves it too unless
    ``API_MCP_ENABLED=false``."""
    from services.api.mcp.__main__ import main

    main()
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from switchboard.db import migrate
    from switchboard.settings import DatabaseSettings

    url = DatabaseSettings().migration_url
    if args.wait:
        try:
            migrate.wait_for_database(url, args.wait)
        except migrate.DatabaseUnreachable as exc:
            print(json.dumps({"error": "database_unreachable", "message": str(exc)}), file=sys.stderr)
            return 1
    if args.downgrade:
        migrate.downgrade(url, args.revision or "base")
    else:
        migrate.upgrade(url, args.revision or "heads")
    return 0


def _topics(args: argparse.Namespace) -> int:
    from switchboard.kafka import admin
    from switchboard.settings import KafkaSettings

    settings = KafkaSettings()
    if args.topics_command == "create":
        created = asyncio.run(admin.ensure_topics(settings, wait_s=args.wait))
        print(json.dumps({"created": created}))
        return 0
    listing = asyncio.run(admin.describe_topics(settings))
    print(json.dumps(listing, indent=2))
    return 0


def _dead_letters(args: argparse.Namespace) -> int:
    """List the dead-letter topic, or replay letters once their cause is fixed (docs/consumers.md)."""
    from switchboard.kafka import dead_letter_admin as letters
    from switchboard.settings import KafkaSettings

    settings = KafkaSettings()
    try:
        chosen = letters.positions(getattr(args, "positions", None) or ())
    except ValueError as exc:
        print(json.dumps({"error": "bad_position", "message": str(exc)}), file=sys.stderr)
        return 2
    if args.letters_command == "replay" and not chosen and not args.all:
        print(json.dumps({"error": "nothing_chosen", "message": "name POSITIONs or pass --all"}), file=sys.stderr)
        return 2
    selection = letters.LetterFilter(
        topic=args.topic, error_code=args.code, service=args.service, since=args.since, positions=chosen
    )
    listing = asyncio.run(letters.read_dead_letters(settings, selection, limit=getattr(args, "limit", None)))
    if args.letters_command == "list":
        for stored in listing.letters:
            print(json.dumps(letters.describe(stored, settings, with_record=args.show_record)))
        for position in listing.unreadable:
            print(json.dumps({"position": str(position), "error_code": "unreadable_dead_letter"}))
        return 0
    missing = chosen - {stored.position for stored in listing.letters}
    report = asyncio.run(
        letters.replay(settings, listing.letters, superseded_by=listing.superseded_by, dry_run=args.dry_run)
    )
    print(json.dumps(report.as_dict() | {"not_found": sorted(str(p) for p in missing)}))
    return 1 if missing or report.failed else 0


def _rotate_keys(args: argparse.Namespace) -> int:
    """Re-seal secrets under the primary key of SWITCHBOARD_ENCRYPTION_KEYS; exit 1 if any failed."""
    from switchboard.crypto import KeyRing
    from switchboard.db.session import create_engine
    from switchboard.rotation import rotate_encryption_keys
    from switchboard.settings import DatabaseSettings

    engine = create_engine(DatabaseSettings().url.get_secret_value(), pool_size=1)
    try:
        report = rotate_encryption_keys(
            engine,
            KeyRing.from_settings(),
            batch_size=args.batch_size,
            org_ids=args.org or None,
            user_ids=args.user or None,
            dry_run=args.dry_run,
        )
    finally:
        engine.dispose()
    print(json.dumps(report.as_dict()))
    return 1 if report.failed else 0


def _admin(args: argparse.Namespace) -> int:
    if args.admin_command == "new-key":
        from switchboard.crypto import KeyRing

        print(f"{args.id}:{KeyRing.generate_key()}")
        return 0
    if args.admin_command == "rotate-keys":
        return _rotate_keys(args)
    from sqlalchemy.orm import Session

    from services.api.identity.service import bootstrap_organization
    from switchboard.db.session import create_engine
    from switchboard.settings import DatabaseSettings

    password = sys.stdin.readline().rstrip("\n") if args.password_stdin else None
    engine = create_engine(DatabaseSettings().url.get_secret_value())
    try:
        with Session(engine) as session, session.begin():
            org_id, user_id, token = bootstrap_organization(
                session, org_name=args.org, email=args.email, password=password, time_zone=args.time_zone
            )
    finally:
        engine.dispose()
    print(json.dumps({"org_id": str(org_id), "user_id": str(user_id), "token": token}))
    return 0


def _instant(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _add_dead_letter_parser(sub: Any) -> None:
    letters = sub.add_parser("dead-letters", help="inspect and replay the dead-letter topic")
    letters_sub = letters.add_subparsers(dest="letters_command", required=True)
    listing = letters_sub.add_parser("list", help="print matching letters, one JSON object per line")
    replay = letters_sub.add_parser("replay", help="send matching letters' records back to their topics")
    for command in (listing, replay):
        command.add_argument("--topic", help="original topic (logical name, or with the prefix)")
        command.add_argument("--code", help="only this error code")
        command.add_argument("--service", help="only letters from this service")
        command.add_argument(
            "--since", type=_instant, help="only letters that failed at or after (ISO 8601; UTC without an offset)"
        )
    listing.add_argument("--limit", type=int, help="at most this many letters")
    listing.add_argument("--show-record", action="store_true", help="include the decoded record (customer content)")
    replay.add_argument("positions", nargs="*", help="PARTITION:OFFSET of letters, as listed")
    replay.add_argument("--all", action="store_true", help="every letter the filters match")
    replay.add_argument("--dry-run", action="store_true", help="say what would be replayed, send nothing")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchboard", description="Run and operate Switchboard.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SERVICES:
        sub.add_parser(name, help=f"run the {name} service")
    sub.add_parser("outbox-relay", help="publish outbox rows to Kafka (the API runs one too, unless disabled)")
    sub.add_parser("mcp", help="run the internal MCP tool server alone (the API serves it too, unless disabled)")
    migrate_parser = sub.add_parser("migrate", help="apply database migrations")
    migrate_parser.add_argument("--revision", help="target revision (default: head, or base with --downgrade)")
    migrate_parser.add_argument("--downgrade", action="store_true", help="downgrade instead of upgrade")
    migrate_parser.add_argument(
        "--wait",
        type=float,
        default=0,
        metavar="SECONDS",
        help="wait up to SECONDS for PostgreSQL to accept connections",
    )
    topics_parser = sub.add_parser("topics", help="manage Kafka topics")
    topics_sub = topics_parser.add_subparsers(dest="topics_command", required=True)
    create = topics_sub.add_parser("create", help="create every registered topic that is missing")
    create.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the broker")
    topics_sub.add_parser("list", help="list registered topics and their state on the broker")
    _add_dead_letter_parser(sub)
    admin_parser = sub.add_parser("admin", help="operator tasks")
    admin_sub = admin_parser.add_subparsers(dest="admin_command", required=True)
    bootstrap = admin_sub.add_parser("bootstrap", help="create an organization with its first admin")
    bootstrap.add_argument("--org", required=True, help="organization name")
    bootstrap.add_argument("--email", required=True, help="the admin's email")
    bootstrap.add_argument("--time-zone", default="UTC", help="IANA time zone of the organization")
    bootstrap.add_argument("--password-stdin", action="store_true", help="read the admin's login password from stdin")
    new_key = admin_sub.add_parser("new-key", help="generate an AES-256 key entry")
    new_key.add_argument("--id", required=True, help="key id, e.g. 2026-11")
    rotate = admin_sub.add_parser(
        "rotate-keys", help="re-encrypt stored secrets under the primary key (old keys must stay in the ring)"
    )
    rotate.add_argument("--batch-size", type=int, default=200, help="rows per transaction")
    rotate.add_argument("--dry-run", action="store_true", help="open every secret, write nothing")
    rotate.add_argument("--org", type=uuid.UUID, action="append", help="only this organization (repeatable)")
    rotate.add_argument("--user", type=uuid.UUID, action="append", help="only this user's TOTP secret (repeatable)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in SERVICES:
        return _run_service(args.command)
    if args.command == "outbox-relay":
        return _outbox_relay()
    if args.command == "mcp":
        return _mcp()
    if args.command == "migrate":
        return _migrate(args)
    if args.command == "admin":
        return _admin(args)
    if args.command == "dead-letters":
        return _dead_letters(args)
    return _topics(args)


if __name__ == "__main__":
    sys.exit(main())
