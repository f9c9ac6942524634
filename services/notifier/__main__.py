"""Entry point: ``python -m services.notifier`` or ``switchboard notifier``."""

from services.notifier.service import Notifier
from services.notifier.settings import NotifierSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = NotifierSettings()
    notifier = Notifier(settings)
    run_service("notifier", notifier.serve, settings, readiness=notifier.ready)


if __name__ == "__main__":
    main()
