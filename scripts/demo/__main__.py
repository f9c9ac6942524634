"""``python -m scripts.demo`` (``make demo``) and ``python -m scripts.demo stop``.

Exit 0 only if every checked expectation held; a step whose feature is not there yet
is printed as "not yet available" and is neither a success nor a failure. The
processes keep running for exploration until ``make down`` (or ``... stop``).
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
from switchboard.settings import DatabaseSettings

RUN_DIR = processes.REPO_ROOT / "var" / "demo"
STATE_FILE = processes.REPO_ROOT / "var" / "demo.json"


def _service_env() -> dict[str, str]:
    return {**os.environ, "SWITCHBOARD_LOG_LEVEL": os.environ.get("SWITCHBOARD_LOG_LEVEL", "INFO")}


def _write_state(path: Path, state: dict[str, object]) -> None:
    """``var/demo.json``, readable by its owner only: it holds an admin token."""
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


def run_demo() -> int:
    report = Report()
    report.section("local stack")
    subprocess.run(["bash", "scripts/stack/stack.sh", "status"], cwd=processes.REPO_ROOT, check=False)
    stopped = processes.stop_previous(RUN_DIR)
    if stopped:
        report.step(f"stopped the previous demo's processes: {', '.join(stopped)}")
    env = _service_env()
    api_key = f"demo-{secrets.token_hex(8)}"
    group = processes.ProcessGroup(RUN_DIR, env)
    report.section("services (separate processes; logs in var/demo/logs/)")
    topology: processes.Topology | None = None
    try:
        topology = processes.start_topology(
            group,
            channel_api_key=api_key,
            service_env={"runner": bootstrap.platform_key_env()},
        )
        for name, proc in group.procs.items():
            report.kv(name, f"pid {proc.popen.pid}  {proc.health_url}")
        supervisor = processes.start_supervisor(group)
        report.kv(processes.SUPERVISOR, f"pid {supervisor.pid}  restarts a process that exits (logs/supervisor.log)")
        report.kv("tool server", f"{topology.mcp_url} ({'in the API' if topology.mcp_mounted else 'own process'})")
        if topology.channel_url is None:
            report.skip("channel", "the local channel server shows what customers receive", "scripts/channel_server.py")
        asyncio.run(_play(report, topology, env, api_key))
    except (RuntimeError, httpx.HTTPError) as error:
        report.expect("demo", "the demo ran to the end", False, str(error))
    report.summary()
    _next_steps(report, topology)
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.demo", description=__doc__)
    parser.add_argument("command", nargs="?", choices=("run", "stop"), default="run")
    args = parser.parse_args(argv)
    if args.command == "stop":
        stopped = processes.stop_previous(RUN_DIR)
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
        return 0
    return run_demo()


if __name__ == "__main__":
    sys.exit(main())
