"""Brokers an end-to-end module runs against: each sansmq server kind on each durable store
(segment files, PostgreSQL), and opt-in a real RabbitMQ (``SANSMQ_RABBITMQ=host:port``, with
``SANSMQ_RABBITMQ_STOMP`` and ``SANSMQ_RABBITMQ_HTTP`` for its STOMP and management listeners).
A module imports the ``pg_url`` and ``target`` fixtures from here."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest
import stomp
from e2ekit import BASE_CONFIG, Collector, ServerProcess, start_server
from pika.exceptions import ChannelClosedByBroker, ConnectionClosedByBroker

import servers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "storage"))
from pgtest import create_db, postgres_bindir, shared_cluster  # noqa: E402

__all__ = ["RABBITMQ", "TARGETS", "Target", "pg_url", "target", "sansmq_only", "refused", "restart", "stomp_conn"]

RABBITMQ = os.environ.get("SANSMQ_RABBITMQ")
RABBITMQ_STOMP = os.environ.get("SANSMQ_RABBITMQ_STOMP")
RABBITMQ_HTTP = os.environ.get("SANSMQ_RABBITMQ_HTTP")
TARGETS = [f"{kind}-{store}" for kind in servers.SERVER_KINDS for store in ("segment", "postgres")]
if RABBITMQ:
    TARGETS.append("rabbitmq")


class Target:
    def __init__(self, name: str, amqp: tuple[str, int], stomp_addr: tuple[str, int] | None,
                 server: ServerProcess | None = None, http: tuple[str, int] | None = None) -> None:
        self.name = name
        self.amqp = amqp
        self.stomp = stomp_addr
        self.server = server
        #: the management listener (RabbitMQ's only when SANSMQ_RABBITMQ_HTTP is set)
        self.http = http

    @property
    def rabbitmq(self) -> bool:
        return self.name == "rabbitmq"

    def conn(self) -> pika.BlockingConnection:
        return pika.BlockingConnection(pika.ConnectionParameters(*self.amqp, heartbeat=0))


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str | None]:
    url = os.environ.get("SANSMQ_PG_DSN")
    if url:
        yield url
        return
    if postgres_bindir() is None:
        yield None
        return
    try:
        url = shared_cluster()  # one server for the whole run: each target takes a fresh database
    except RuntimeError:
        url = None
    yield url


@pytest.fixture(scope="module", params=TARGETS)
def target(request: pytest.FixtureRequest, pg_url: str | None, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Target]:
    name = request.param
    if name == "rabbitmq":
        assert RABBITMQ is not None
        yield Target(name, _addr(RABBITMQ), _addr(RABBITMQ_STOMP) if RABBITMQ_STOMP else None,
                     http=_addr(RABBITMQ_HTTP) if RABBITMQ_HTTP else None)
        return
    kind, store = name.split("-")
    extra: list[str] = []
    if store == "postgres":
        if pg_url is None:
            reason = "PostgreSQL not available (scripts/install-postgres.sh)"
            if os.environ.get("SANSMQ_REQUIRE_POSTGRES") == "1":
                pytest.fail(reason + " but SANSMQ_REQUIRE_POSTGRES=1")
            pytest.skip(reason)
        extra = ["--store", create_db(pg_url)]
    cfg = tmp_path_factory.mktemp("cfg") / "sansmq.toml"
    cfg.write_text(BASE_CONFIG)
    srv = start_server(kind, cfg, *extra)
    t = Target(name, ("127.0.0.1", srv.port("amqp")), ("127.0.0.1", srv.port("stomp")), srv,
               ("127.0.0.1", srv.port("http")))
    try:
        yield t
    finally:
        assert t.server is not None
        assert t.server.terminate() == 0, t.server.lines[-20:]


def sansmq_only(t: Target, why: str) -> None:
    if t.rabbitmq:
        pytest.skip(f"sansmq only: {why}")


def refused(t: Target, fn: Any) -> tuple[int, str]:
    """The (code, text) a broker closes a channel or connection with for ``fn(channel)``."""
    conn = t.conn()
    ch = conn.channel()
    try:
        fn(ch)
        conn.process_data_events(0.5)
        ch.queue_declare("", exclusive=True)  # a round trip: the refusal arrives before its answer
    except (ChannelClosedByBroker, ConnectionClosedByBroker) as exc:
        return exc.reply_code, exc.reply_text
    finally:
        if conn.is_open:
            conn.close()
    raise AssertionError("not refused")


def stomp_conn(t: Target) -> tuple[stomp.Connection, Collector]:
    if t.stomp is None:
        pytest.skip("no STOMP address for this broker")
    c = stomp.Connection([t.stomp], heartbeats=(0, 0), reconnect_attempts_max=1, vhost="/")
    col = Collector()
    c.set_listener("c", col)
    c.connect("guest", "guest", wait=True)
    return c, col


def restart(t: Target, kill: bool) -> None:
    """Stop the sansmq server (SIGKILL or SIGTERM) and start it again on the same data directory or
    database."""
    old = t.server
    assert old is not None
    if kill:
        old.proc.kill()
        old.proc.wait()
    else:
        assert old.terminate() == 0, old.lines[-20:]
    srv = t.server = ServerProcess(list(old.proc.args), old.kind)
    t.amqp = ("127.0.0.1", srv.port("amqp"))
    t.stomp = ("127.0.0.1", srv.port("stomp"))
    t.http = ("127.0.0.1", srv.port("http"))
