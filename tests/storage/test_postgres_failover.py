"""PostgreSQL failover under a running broker: a primary with a synchronous standby
(scripts/pg-ha.sh), ``sansmq serve --store`` given both hosts; the primary dies mid-stream, the
standby is promoted, and the broker reconnects to it by itself. Publishers are refused (basic.nack)
while there is no primary, and every message confirmed before, during or after is in the promoted
database."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pika
import pytest
from pgtest import PgHa
from test_store_servers import pika_connect

from engine.postgres_store import PostgresStore
from engine.storage.postgres.store import _safe_dsn, connect_options
from engine.store import QueueDef
from servers.cli import PROTOCOLS

ONLY_AMQP = ["--amqp", "127.0.0.1:0", *(f"--no-{p}" for p, _, _ in PROTOCOLS if p != "amqp"), "--no-http",
             "--no-prometheus"]
QUEUE = "failover"
PERSISTENT = pika.BasicProperties(delivery_mode=2)


@pytest.fixture
def ha(pg_server: str) -> Iterator[PgHa]:
    """A primary and its synchronous standby of this test's own (``pg_server``: PostgreSQL is there)."""
    h = PgHa()
    h.start()
    try:
        yield h
    finally:
        h.stop()


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None
    return port


def wait_until(pred, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class Broker:
    """``python -m servers serve`` on the AMQP port only, its log in a file (never a full pipe)."""

    def __init__(self, dsn: str, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen([sys.executable, "-m", "servers", "serve", *ONLY_AMQP, "--store", dsn],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w"))
        wait_until(lambda: "listening on" in self.text() or self.proc.poll() is not None, 30, "the broker")
        line = next((ln for ln in self.text().splitlines() if "amqp listening on" in ln), None)
        assert line is not None, self.text()
        self.addr = ("127.0.0.1", int(line.rsplit(":", 1)[1].split()[0]))

    def text(self) -> str:
        return self.log.read_text()

    def kill(self) -> None:
        """kill -9: nothing is flushed on the way out."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=15)


class Publisher(threading.Thread):
    """Publishes persistent messages with confirms, one at a time, without end; a nack is counted
    and the next message goes out; a lost connection is opened again."""

    def __init__(self, addr: tuple[str, int]) -> None:
        super().__init__(daemon=True)
        self.addr = addr
        self.confirmed: list[bytes] = []
        self.published: list[bytes] = []
        self.refused = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            try:
                conn = pika_connect(self.addr)
                ch = conn.channel()
                ch.confirm_delivery()
                while not self.stopping.is_set():
                    body = b"m%06d" % n
                    n += 1
                    self.published.append(body)
                    try:
                        ch.basic_publish("", QUEUE, body, PERSISTENT)
                        self.confirmed.append(body)
                    except pika.exceptions.NackError:
                        self.refused += 1
                        time.sleep(0.02)
                conn.close()
            except pika.exceptions.AMQPError:
                time.sleep(0.1)


def drain(addr: tuple[str, int]) -> list[bytes]:
    conn = pika_connect(addr)
    ch = conn.channel()
    got = []
    while (msg := ch.basic_get(QUEUE, auto_ack=True))[0] is not None:
        got.append(msg[2])
    conn.close()
    return got


def test_dsn_shown_without_password_each_host_with_its_port() -> None:
    assert _safe_dsn("postgresql://u:secret@h1:5433,h2:5434/db") == "postgresql://u@h1:5433,h2:5434/db"
    assert _safe_dsn("postgresql://u:secret@h1,h2:6000/db") == "postgresql://u@h1,h2:6000/db"  # h1: default
    assert _safe_dsn("host=h1,h2 port=6000 dbname=db password=x") == "postgresql://h1:6000,h2:6000/db"
    assert _safe_dsn("postgresql://h1/db") == "postgresql://h1/db"


def test_connect_options_ask_for_the_primary_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGTARGETSESSIONATTRS", raising=False)
    assert connect_options("postgresql://h1,h2/db")["target_session_attrs"] == "read-write"
    assert "target_session_attrs" not in connect_options("postgresql://h1/db?target_session_attrs=any")
    monkeypatch.setenv("PGTARGETSESSIONATTRS", "prefer-standby")
    assert "target_session_attrs" not in connect_options("postgresql://h1,h2/db")


def test_store_on_a_multi_host_dsn_writes_to_the_primary_whatever_the_order(ha: PgHa) -> None:
    """The standby listed first and no target_session_attrs: the store still opens on the primary
    (a read-only standby would refuse the schema and every commit)."""
    primary, standby = ha.urls["PRIMARY"], ha.urls["STANDBY"]
    dsn = f"postgresql://sansmq@127.0.0.1:{port_of(standby)},127.0.0.1:{port_of(primary)}/postgres"
    store = PostgresStore(dsn)
    try:
        assert store.display_dsn == dsn
        store.recover()
        store.add_queue(QueueDef("/", "q", True, False, None))
        store.sync(0)
        assert store._conn is not None and store._conn.info.port == port_of(primary)
    finally:
        store.close()


def test_target_session_attrs_of_the_dsn_wins(ha: PgHa) -> None:
    """The user may point the store at a standby on purpose; it then fails loudly at open."""
    dsn = ha.urls["STANDBY"] + "?target_session_attrs=any"
    with pytest.raises(Exception, match="read-only"):
        PostgresStore(dsn)


def test_broker_follows_the_promoted_standby_and_loses_nothing_confirmed(ha: PgHa, tmp_path: Path) -> None:
    dsn = ha.urls["DSN"]
    assert "target_session_attrs=read-write" in dsn and "," in dsn
    broker = Broker(dsn, tmp_path / "broker.log")
    try:
        conn = pika_connect(broker.addr)
        conn.channel().queue_declare(QUEUE, durable=True)
        conn.close()
        pub = Publisher(broker.addr)
        pub.start()
        wait_until(lambda: len(pub.confirmed) >= 30, what="confirms before the crash")

        ha.crash_primary()  # pg_ctl stop -m immediate
        wait_until(lambda: pub.refused >= 3, what="publishers refused without a primary")
        before_promote = len(pub.confirmed)
        time.sleep(0.5)
        assert len(pub.confirmed) == before_promote, "confirmed with no primary to commit to"

        ha.promote()
        wait_until(lambda: len(pub.confirmed) >= before_promote + 30, what="confirms on the new primary")
        pub.stopping.set()
        pub.join(timeout=30)
        assert not pub.is_alive()
        assert f"writing through 127.0.0.1:{port_of(ha.urls['STANDBY'])}" in broker.text()
        assert "commits work again" in broker.text()
    finally:
        broker.kill()

    # a new broker on the promoted database finds every confirmed message, each once
    broker = Broker(dsn, tmp_path / "broker2.log")
    try:
        got = drain(broker.addr)
    finally:
        broker.kill()
    assert len(got) == len(set(got))
    assert set(pub.confirmed) <= set(got), sorted(set(pub.confirmed) - set(got))[:10]
    assert set(got) <= set(pub.published)
