"""``switchboard migrate --wait``: the migration Job of a fresh cluster starts with its database and
waits for it, instead of failing its few tries while PostgreSQL is still being initialized."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy.engine import make_url

from switchboard.db import migrate
from tests.support.ports import free_port
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, target):
            end.close()


@contextmanager
def _late_proxy(port: int, upstream: tuple[str, int], after_s: float) -> Iterator[None]:
    """PostgreSQL on ``port`` from ``after_s`` on (a TCP relay to the real one): nothing listens before."""
    stop = threading.Event()

    def serve() -> None:
        time.sleep(after_s)
        with socket.create_server(("127.0.0.1", port)) as server:
            server.settimeout(0.2)
            while not stop.is_set():
                try:
                    client, _ = server.accept()
                except TimeoutError:
                    continue
                backend = socket.create_connection(upstream)
                for a, b in ((client, backend), (backend, client)):
                    threading.Thread(target=_pipe, args=(a, b), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def test_migrate_waits_for_a_database_that_comes_up_late(stack: StackEndpoints) -> None:
    real = make_url(stack.database_owner_url)
    port = free_port()
    late = real.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
    with _late_proxy(port, (real.host or "127.0.0.1", real.port or 5432), after_s=1.5):
        started = time.monotonic()
        migrate.wait_for_database(late, wait_s=20, every_s=0.5)
        waited = time.monotonic() - started
    assert 1.0 <= waited < 15, waited


def test_migrate_gives_up_with_a_clear_error_after_its_wait() -> None:
    nowhere = f"postgresql+psycopg://switchboard:x@127.0.0.1:{free_port()}/switchboard"
    started = time.monotonic()
    with pytest.raises(migrate.DatabaseUnreachable, match="did not answer within 1 s"):
        migrate.wait_for_database(nowhere, wait_s=1, every_s=0.3)
    assert 1.0 <= time.monotonic() - started < 5
