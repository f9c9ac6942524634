"""``switchboard``: the operator's single entry point.

    switchboard api|dispatcher|runner|notifier|brief   run one service in the foreground
    switchboard migrate [--revision REV] [--downgrade]  apply database migrations (owner role)
    switchboard topics create [--wait SECONDS]          create every registered topic (idempotent)
    switchboard topics list                              show the registry and what the broker has

Each service is imported only when asked for, so ``switchboard migrate`` never
loads the runner's provider SDKs and one broken service cannot stop the others' CLI.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
from collections.abc import Sequence

SERVICES = ("api", "dispatcher", "runner", "notifier", "brief")


def _run_service(name: str) -> int:
    module = importlib.import_module(f"services.{name}.__main__")
    module.main()
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from switchboard.db import migrate
    from switchboard.settings import DatabaseSettings

    url = DatabaseSettings().migration_url
    if args.downgrade:
        migrate.downgrade(url, args.revision or "base")
    else:
        migrate.upgrade(url, args.revision or "head")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="switchboard", description="Run and operate Switchboard.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SERVICES:
        sub.add_parser(name, help=f"run the {name} service")
    migrate_parser = sub.add_parser("migrate", help="apply database migrations")
    migrate_parser.add_argument("--revision", help="target revision (default: head, or base with --downgrade)")
    migrate_parser.add_argument("--downgrade", action="store_true", help="downgrade instead of upgrade")
    topics_parser = sub.add_parser("topics", help="manage Kafka topics")
    topics_sub = topics_parser.add_subparsers(dest="topics_command", required=True)
    create = topics_sub.add_parser("create", help="create every registered topic that is missing")
    create.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the broker")
    topics_sub.add_parser("list", help="list registered topics and their state on the broker")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command in SERVICES:
        return _run_service(args.command)
    if args.command == "migrate":
        return _migrate(args)
    return _topics(args)


if __name__ == "__main__":
    sys.exit(main())
