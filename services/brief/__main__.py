"""Entry point: ``python -m services.brief`` or ``switchboard brief``."""

from services.brief.service import Brief
from services.brief.settings import BriefSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = BriefSettings()
    brief = Brief(settings)
    run_service("brief", brief.serve, settings, readiness=brief.ready)


if __name__ == "__main__":
    main()
