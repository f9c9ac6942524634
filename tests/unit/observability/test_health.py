"""The probe server answers from its own thread, judged by the service loop's heartbeat: a busy
loop is alive, a stuck one is not, and readiness is the service's own check."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from switchboard.observability.health import HealthServer


def _get_in_thread(url: str, delay_s: float, out: list[tuple[int, float]]) -> threading.Thread:
    """GET ``url`` from another thread after ``delay_s``: the service's loop may be blocked meanwhile."""

    def run() -> None:
        time.sleep(delay_s)
        started = time.monotonic()
        response = httpx.get(url, timeout=10)
        out.append((response.status_code, time.monotonic() - started))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


async def test_a_loop_busy_for_seconds_still_answers_its_liveness_probe_at_once() -> None:
    server = HealthServer(host="127.0.0.1", beat_s=0.05, stall_s=30)
    await server.start()
    try:
        await asyncio.sleep(0.1)
        answers: list[tuple[int, float]] = []
        probe = _get_in_thread(f"http://127.0.0.1:{server.port}/healthz", 0.2, answers)
        time.sleep(3.0)  # the service's loop does three seconds of work without yielding
        probe.join()
        [(status, took_s)] = answers
        assert status == 200
        assert took_s < 2.0, "answered while the loop was busy, not after it"
    finally:
        await server.stop()


async def test_a_stuck_loop_fails_liveness_and_readiness_then_recovers() -> None:
    server = HealthServer(host="127.0.0.1", beat_s=0.05, stall_s=0.5)
    await server.start()
    try:
        await asyncio.sleep(0.2)
        base = f"http://127.0.0.1:{server.port}"
        answers: list[tuple[int, float]] = []
        ready: list[tuple[int, float]] = []
        probes = [_get_in_thread(f"{base}/healthz", 1.2, answers), _get_in_thread(f"{base}/readyz", 1.2, ready)]
        time.sleep(2.0)  # no beat for longer than stall_s
        for probe in probes:
            probe.join()
        assert answers[0][0] == 503 and ready[0][0] == 503
        await asyncio.sleep(0.3)  # the loop beats again
        async with httpx.AsyncClient() as client:
            assert (await client.get(f"{base}/healthz")).status_code == 200
    finally:
        await server.stop()


async def test_readiness_is_the_services_check_and_a_failing_check_is_not_ready() -> None:
    state = {"ready": False, "explode": False}

    async def check() -> bool:
        if state["explode"]:
            raise RuntimeError("broker gone")
        return state["ready"]

    server = HealthServer(host="127.0.0.1", readiness=check, beat_s=0.05)
    await server.start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient() as client:

            async def readyz_after_a_beat() -> int:
                await asyncio.sleep(0.2)
                return (await client.get(f"{url}/readyz")).status_code

            assert await readyz_after_a_beat() == 503
            state["ready"] = True
            assert await readyz_after_a_beat() == 200
            state["explode"] = True
            assert await readyz_after_a_beat() == 503
            assert (await client.get(f"{url}/healthz")).status_code == 200, "alive, just not ready"
            metrics = await client.get(f"{url}/metrics")
            assert metrics.status_code == 200 and b"# HELP" in metrics.content
            assert (await client.get(f"{url}/nope")).status_code == 404
    finally:
        await server.stop()
