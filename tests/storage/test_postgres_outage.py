"""Fault injection with a real PostgreSQL server stopped in the middle of a run, under each server:
STOMP and AMQP publishers are refused (never confirmed), the consumer keeps being served, and when
the database is back the broker reconnects by itself and confirms again; a restart then finds the
confirmed state."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika
import psycopg
import pytest
from pgtest import PgCluster
from test_store_servers import LISTENERS, pika_connect, stomp_connect

import servers
from engine.postgres_store import PostgresStore
from engine.store import StoreError
from servers import make_broker, running


@pytest.fixture
def cluster(pg_server: str) -> Iterator[PgCluster]:
    """A PostgreSQL server of this test's own (``pg_server`` only checks one can be had)."""
    c = PgCluster()
    c.start()
    try:
        yield c
    finally:
        c.stop()


def wait_until(pred, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_database_down_refuses_publishers_then_recovers(kind: str, cluster: PgCluster) -> None:
    store = PostgresStore(cluster.url, retry_interval=0.2)
    with running(kind, LISTENERS, broker=make_broker(store=store)) as srv:
        con, clst = stomp_connect(srv.address())
        con.subscribe("/queue/f", id="s", ack="client-individual")
        pub, plst = stomp_connect(srv.address())
        pub.send("/queue/f", b"before", headers={"persistent": "true", "receipt": "r0"})
        assert plst.wait(lambda: "r0" in plst.receipts) and clst.wait(lambda: clst.messages == [b"before"])
        amqp = pika_connect(srv.address("amqp"))
        ch = amqp.channel()
        ch.confirm_delivery()
        ch.basic_publish("", "f", b"amqp-before", pika.BasicProperties(delivery_mode=2))  # confirmed

        cluster.stop(remove=False)  # the database goes away
        pub.send("/queue/f", b"during", headers={"persistent": "true", "receipt": "r1"})
        assert plst.wait(lambda: not pub.is_connected(), 15)  # ERROR + close: the commit failed
        assert "r1" not in plst.receipts
        with pytest.raises(pika.exceptions.NackError):  # basic.nack: never confirmed, channel stays open
            ch.basic_publish("", "f", b"amqp-during", pika.BasicProperties(delivery_mode=2))
        # the consumer is still served: it gets what is queued and may ack (no receipt: that
        # would wait for a commit)
        assert clst.wait(lambda: b"amqp-before" in clst.messages and b"during" in clst.messages)
        con.ack(clst.acks[0])  # "before"
        time.sleep(0.3)
        assert con.is_connected() and not clst.errors

        cluster.restart()  # the database is back: the broker reconnects on its own
        wait_until(lambda: store._failed is None)
        pub2, plst2 = stomp_connect(srv.address())
        pub2.send("/queue/f", b"after", headers={"persistent": "true", "receipt": "r2"})
        assert plst2.wait(lambda: "r2" in plst2.receipts)
        for c in (con, pub2):
            c.disconnect()
    store.close()
    store = PostgresStore(cluster.url)
    got = [sm.message.body for sm in store.recover().messages[("/", "f")]]
    store.close()
    assert b"after" in got and b"amqp-before" in got and b"before" not in got
    assert b"amqp-during" not in got


def backend_pids(url: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as c:
        return {r[0] for r in c.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'sansmq'")}


def test_reconnect_ends_our_own_stale_session_that_still_holds_the_lock(pg_dsn: str) -> None:
    """The broker lost its connection but the server has not noticed (a network cut: without server
    keepalives a session lives on for hours), so its old session still holds the advisory lock. The
    store recognises that session as its own, ends it and takes the lock again; another broker is
    still refused."""
    store = PostgresStore(pg_dsn, retry_interval=0.2)
    store.recover()
    stale = store._conn
    assert stale is not None
    old_pid = stale.info.backend_pid
    store._conn = None  # forgotten by the client, alive on the server
    try:
        store.add_vhost("v")
        store.sync(0)  # reconnects: the lock is held by the stale session
        assert old_pid not in backend_pids(pg_dsn) and store._conn is not None
        with pytest.raises(StoreError, match="in use by another sansmq broker"):
            PostgresStore(pg_dsn, lock_wait=0.3)
    finally:
        stale.close()
        store.close()
    store = PostgresStore(pg_dsn)
    assert "v" in store.recover().vhosts
    store.close()
