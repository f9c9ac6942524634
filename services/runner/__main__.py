"""Entry point: ``python -m services.runner`` or ``switchboard runner``."""

from services.runner.service import Runner
from services.runner.settings import RunnerSettings
from switchboard.lifecycle import run_service


def main() -> None:
    settings = RunnerSettings()
    runner = Runner(settings)
    run_service("runner", runner.serve, settings, readiness=runner.ready)


if __name__ == "__main__":
    main()
