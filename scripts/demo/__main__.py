"""``python -m scripts.demo`` (``make demo``), ``... services`` (``make services``) and ``... stop``.

``run`` (the default): the five services, then the scripted conversations. Exit 0 only if
every checked expectation held; a step whose feature is not there yet is printed as "not
yet available" and is neither a success nor a failure.

``services``: the same processes with nothing played and no org created — the local stack
to build on (your own org with ``switchboard admin bootstrap``, your own agents through the
API) — at production settings where the script would shorten them. Its URLs and the channel
server's key go to ``var/services.json``.

Either way the processes keep running, supervised, until ``make down`` (or ``... stop``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import httpx

from scripts.demo import bootstrap, processes
from scripts.demo.owner import play
from scripts.demo.report import Report
from scripts.demo.scenario import Stage
from services.notifier.settings import NotifierSettings
from switchboard.settings import DatabaseSettings

RUN_DIR = processes.REPO_ROOT / "var" / "demo"
STATE_FILE = processes.REPO_ROOT / "var" / "demo.json"
SERVICES_FILE = processes.REPO_ROOT / "var" / "services.json"
# ``make services`` runs at production settings: the demo's script shortens the notifier's
# morning-push pass (2 s) to wait for it; nothing waits here.
PRODUCTION_DIGEST_INTERVAL_S = str(NotifierSettings.model_fields["digest_interval_s"].default)
PRODUCTION_ENV = {"notifier": {"NOTIFIER_DIGEST_INTERVAL_S": PRODUCTION_DIGEST_INTERVAL_S}}


def _service_env() -> dict[str, str]:
    return {**os.environ, "SWITCHBOARD_LOG_LEVEL": os.environ.get("SWITCHBOARD_LOG_LEVEL", "INFO")}


def _write_state(path: Path, state: dict[str, object]) -> None:
    """``var/demo.json`` or ``var/services.json``, readable by its owner only: they hold an admin
    token, the channel server's key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(state, out, indent=2)
        out.write("\n")
    tmp.replace(path)


async def _play(report: Report, topology: processes.Topology, env: dict[str, str], api_key: str) -> None:
    async with httpx.AsyncClient(base_url=topology.api_url, timeout=30) as api:
        report.section("bootstrap (switchboard admin bootstrap + the REST API)")
        org = await bootstrap.bootstrap(
            api,
            env,
            channel_url=topology.channel_url or "http://127.0.0.1:9",
            channel_api_key=api_key,
            dispatcher_metrics_url=topology.metrics_urls["dispatcher"],
            owner_webhook=topology.channel_url is not None,
        )
        report.kv("org", org.org_id)
        report.kv("channel session", f"{org.session_name} (working, via a signed session.status webhook)")
        for agent in org.agents.values():
            report.kv("published agent", f"{agent.name} — priority {agent.priority}")
        model = f"{org.model.provider}/{org.model.model}"
        report.kv("model", model if org.model.is_llm else f"{model} — the built-in rule-based demo model, NOT an LLM")
        _write_state(
            STATE_FILE,
            {
                "org_id": org.org_id,
                "user_id": org.user_id,
                "token": org.token,
                "api_url": topology.api_url,
                "channel_server_url": topology.channel_url,
                "channel_session_id": org.channel_session_id,
                "session_name": org.session_name,
                "webhook_secret": org.webhook_secret,
                "model": asdict(org.model),
                "agents": {name: asdict(agent) for name, agent in org.agents.items()},
                "mcp_url": topology.mcp_url,
                "metrics_urls": topology.metrics_urls,
                "logs_dir": str(RUN_DIR / "logs"),
            },
        )
        report.kv("written", f"{STATE_FILE.relative_to(processes.REPO_ROOT)} (org id, admin token, URLs)")
        channel = httpx.AsyncClient(base_url=topology.channel_url, timeout=10) if topology.channel_url else None
        try:
            stage = Stage(api, channel, org, report, DatabaseSettings().url.get_secret_value())
            await play(stage)
        finally:
            if channel is not None:
                await channel.aclose()


def _next_steps(report: Report, topology: processes.Topology | None) -> None:
    report.section("where to look next")
    if topology is not None:
        report.kv("API docs", f"{topology.api_url}/docs")
        for name, url in topology.metrics_urls.items():
            report.kv(f"metrics ({name})", url)
        if topology.channel_url:
            report.kv("what customers got", f"{topology.channel_url}/api/received")
            report.kv("what the owner's webhook got", f"{topology.channel_url}/api/org-events")
    report.kv("demo org and token", 'var/demo.json  (curl -H "Authorization: Bearer $TOKEN" .../api/v1/runs)')
    report.kv("service logs", f"{RUN_DIR.relative_to(processes.REPO_ROOT)}/logs/")
    report.kv("stop everything", "make down")


def _start(
    report: Report,
    env: dict[str, str],
    api_key: str,
    *,
    production: bool,
    run_dir: Path = RUN_DIR,
    preferred: bool = True,
) -> processes.Topology:
    """The previous run's processes stopped, then the five services (and the channel server) started
    and supervised; raises ``RuntimeError`` when one does not come up."""
    report.section("local stack")
    subprocess.run(["bash", "scripts/stack/stack.sh", "status"], cwd=processes.REPO_ROOT, check=False)
    stopped = processes.stop_previous(run_dir)
    if stopped:
        report.step(f"stopped the previous run's processes: {', '.join(stopped)}")
    group = processes.ProcessGroup(run_dir, env)
    report.section(f"services (separate processes; logs in {_shown(run_dir / 'logs')}/)")
    service_env: dict[str, dict[str, str]] = {"runner": bootstrap.platform_key_env()}
    if production:
        service_env |= PRODUCTION_ENV
    topology = processes.start_topology(group, channel_api_key=api_key, service_env=service_env, preferred=preferred)
    for name, proc in group.procs.items():
        report.kv(name, f"pid {proc.popen.pid}  {proc.health_url}")
    supervisor = processes.start_supervisor(group)
    report.kv(processes.SUPERVISOR, f"pid {supervisor.pid}  restarts a process that exits (logs/supervisor.log)")
    report.kv("tool server", f"{topology.mcp_url} ({'in the API' if topology.mcp_mounted else 'own process'})")
    if topology.channel_url is None:
        report.skip("channel", "the local channel server shows what customers receive", "scripts/channel_server.py")
    return topology


def _previous_channel_key(state_file: Path) -> str | None:
    """The channel server's key of the previous ``make services``: a channel session set up
    against it keeps working after a restart."""
    try:
        key = json.loads(state_file.read_text()).get("channel_server_api_key")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, str) and key else None


def _shown(path: Path) -> str:
    """A path as the README's commands see it: relative to the repository when inside it."""
    return str(path.relative_to(processes.REPO_ROOT)) if path.is_relative_to(processes.REPO_ROOT) else str(path)


def run_demo() -> int:
    report = Report()
    env = _service_env()
    api_key = f"demo-{secrets.token_hex(8)}"
    topology: processes.Topology | None = None
    try:
        topology = _start(report, env, api_key, production=False)
        asyncio.run(_play(report, topology, env, api_key))
    except (RuntimeError, httpx.HTTPError) as error:
        report.expect("demo", "the demo ran to the end", False, str(error))
    report.summary()
    _next_steps(report, topology)
    return 0 if report.ok else 1


def run_services(run_dir: Path = RUN_DIR, state_file: Path = SERVICES_FILE, *, preferred: bool = True) -> int:
    """``make services``: the stack and the five services, nothing played, until ``make down``."""
    report = Report()
    api_key = _previous_channel_key(state_file) or f"local-{secrets.token_hex(8)}"
    try:
        topology = _start(report, _service_env(), api_key, production=True, run_dir=run_dir, preferred=preferred)
    except RuntimeError as error:
        report.expect("services", "every service came up", False, str(error))
        report.summary()
        stopped = processes.stop_previous(run_dir)  # what did come up is not left running unsupervised
        print(f"stopped: {', '.join(stopped) or 'nothing'}; logs in {_shown(run_dir / 'logs')}/")
        return 1
    _write_state(
        state_file,
        {
            "api_url": topology.api_url,
            "channel_server_url": topology.channel_url,
            # What a channel session pointing at the local channel server needs as its WAHA API key.
            "channel_server_api_key": api_key if topology.channel_url else None,
            "mcp_url": topology.mcp_url,
            "metrics_urls": topology.metrics_urls,
            "logs_dir": str(run_dir / "logs"),
        },
    )
    report.section("where to look next")
    report.kv("API docs", f"{topology.api_url}/docs")
    for name, url in topology.metrics_urls.items():
        report.kv(f"metrics ({name})", url)
    report.kv("an org and its admin", ".venv/bin/switchboard admin bootstrap --org NAME --email EMAIL  (its token)")
    report.kv("written", f"{_shown(state_file)} (URLs, the channel server's key)")
    report.kv("service logs", f"{_shown(run_dir / 'logs')}/")
    report.kv("stop everything", "make down")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.demo", description=__doc__)
    parser.add_argument("command", nargs="?", choices=("run", "services", "stop"), default="run")
    args = parser.parse_args(argv)
    if args.command == "stop":
        stopped = processes.stop_previous(RUN_DIR)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    return run_services() if args.command == "services" else run_demo()


if __name__ == "__main__":
    sys.exit(main())
