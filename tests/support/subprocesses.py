"""Stopping the child processes tests start."""

from __future__ import annotations

import subprocess
from typing import Any


def terminate(proc: subprocess.Popen[Any], *, timeout_s: float = 20) -> None:
    """SIGTERM, then SIGKILL if it is still running after ``timeout_s``; always reaped."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
