"""``make services`` (``python -m scripts.demo services``): the five services up, at production
settings, nothing played; ``make down`` stops what it started."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import httpx
import pytest

from scripts.demo import processes
from scripts.demo.__main__ import PRODUCTION_DIGEST_INTERVAL_S, run_services
from switchboard.settings import KafkaSettings

SERVICES = {"api", "dispatcher", "runner", "notifier", "brief"}


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


async def test_make_services_starts_the_five_services_ready_and_plays_nothing(
    e2e_database: str, e2e_topics: KafkaSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", e2e_database)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", e2e_topics.bootstrap_servers)
    monkeypatch.setenv("KAFKA_TOPIC_PREFIX", e2e_topics.topic_prefix)
    monkeypatch.setenv("KAFKA_CONVERSATION_PARTITIONS", str(e2e_topics.conversation_partitions))
    run_dir, state_file = tmp_path / "services", tmp_path / "services.json"
    # A previous run's key is kept: a channel session set up against the channel server still works.
    state_file.write_text(json.dumps({"channel_server_api_key": "local-kept"}))
    pids: dict[str, int] = {}
    try:
        assert await asyncio.to_thread(run_services, run_dir, state_file, preferred=False) == 0

        state = json.loads(state_file.read_text())
        assert stat.S_IMODE(state_file.stat().st_mode) == 0o600  # it holds the channel server's key
        assert state["channel_server_api_key"] == "local-kept"
        async with httpx.AsyncClient(timeout=10) as client:
            assert (await client.get(f"{state['api_url']}/readyz")).status_code == 200
            assert set(state["metrics_urls"]) == SERVICES
            for url in state["metrics_urls"].values():
                assert (await client.get(url)).status_code == 200
            # Nothing played: the channel server's customers got nothing.
            assert (await client.get(f"{state['channel_server_url']}/api/received")).json() == []

        pids = {p.stem: int(p.read_text()) for p in (run_dir / "pids").glob("*.pid")}
        assert set(pids) >= SERVICES and processes.SUPERVISOR in pids
        # The channel server's key is in its environment, not on its command line (``ps`` shows those).
        assert b"local-kept" not in Path(f"/proc/{pids['channel']}/cmdline").read_bytes()
        # Production settings, not the demo script's shortened morning-push pass.
        assert _environ(pids["notifier"])["NOTIFIER_DIGEST_INTERVAL_S"] == PRODUCTION_DIGEST_INTERVAL_S
    finally:
        stopped = processes.stop_previous(run_dir)
    assert SERVICES | {processes.SUPERVISOR} <= set(stopped)
    assert not [name for name, pid in pids.items() if _running(pid)]


def _running(pid: int) -> bool:
    """Alive and not a zombie (this test process started them, and has not reaped them)."""
    try:
        return bool(Path(f"/proc/{pid}/cmdline").read_bytes())
    except OSError:
        return False
