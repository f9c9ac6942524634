"""A real PgBouncer in front of the local PostgreSQL, for tests of what a connection pooler changes.

Operators put one between the services and PostgreSQL (docs/deploy.md: CloudNativePG's
``Pooler`` is PgBouncer). In ``transaction`` mode a client keeps a server session only while a
transaction is open, so whatever lives in a session (an advisory lock, a setting) is shared
with the next client. The Debian package provides the binary (``.ci/run`` installs it); as
root it runs as the ``postgres`` user, as the stack's PostgreSQL does.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import URL

from tests.support.ports import free_port, listening
from tests.support.subprocesses import terminate

BINARY_PATHS = ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer")


def pgbouncer_binary() -> str:
    """The installed pgbouncer; a clear failure (not a skip) where it is missing."""
    found = shutil.which("pgbouncer") or next((p for p in BINARY_PATHS if os.access(p, os.X_OK)), None)
    if found is None:
        raise RuntimeError("pgbouncer is not installed: apt-get install pgbouncer (.ci/run does)")
    return found


@contextmanager
def pgbouncer(server: URL, *, pool_mode: str = "transaction", pool_size: int = 2) -> Iterator[URL]:
    """PgBouncer for ``server``'s database and role; yields the URL that goes through it.

    Clients are trusted (it listens on 127.0.0.1 only, for the test's life); the pooler logs in
    to PostgreSQL with ``server``'s credentials. ``options`` is accepted and ignored, as poolers
    are usually configured, since our clients send TCP keepalive settings that way.
    """
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="sb-pgbouncer-"))
    assert server.database and server.username and server.password is not None
    (workdir / "userlist.txt").write_text(f'"{server.username}" ""\n')
    (workdir / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"{server.database} = host={server.host} port={server.port} dbname={server.database} "
        f"user={server.username} password={server.password}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'userlist.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nreserve_pool_size = 0\n"
        "ignore_startup_parameters = options,extra_float_digits\n"
        f"logfile = {workdir / 'pgbouncer.log'}\n"
    )
    command = [pgbouncer_binary(), str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:
        shutil.chown(workdir, "postgres")
        for child in workdir.iterdir():
            shutil.chown(child, "postgres")
        command = ["runuser", "-u", "postgres", "--", *command]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 15
        while not listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (workdir / "pgbouncer.log").read_text() if (workdir / "pgbouncer.log").exists() else ""
                raise RuntimeError(f"pgbouncer did not start: {log[-2000:]}")
            time.sleep(0.05)
        yield server.set(host="127.0.0.1", port=port, password=None)
    finally:
        terminate(proc, timeout_s=10)
        shutil.rmtree(workdir, ignore_errors=True)
