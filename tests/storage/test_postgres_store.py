"""PostgresStore specifics on a real PostgreSQL server: group commit, a loop that never waits for the
database, lost connections (publishers refused, consumers served, reconnect), the advisory lock."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from storagetest_helpers import connected, new_net, send, split, subscribe

from engine._message import Message
from engine.postgres_store import PostgresStore
from engine.store import QueueDef, StoreError
from stompproto import Ack


def msg(i: int, body: bytes = b"") -> Message:
    return Message(i, "", "q", {}, body or b"body-%d" % i, persistent=True)


def backend_pid(store: PostgresStore) -> int:
    assert store._conn is not None
    return store._conn.info.backend_pid


def terminate(dsn: str, pid: int) -> None:
    """The server drops the store's connection (as a restart or a network cut would)."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def wait_until(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class FlakyStore(PostgresStore):
    """Connecting fails while ``down`` is set (the server cannot be reached)."""

    down = False

    def _connect(self):
        if self.down:
            raise psycopg.OperationalError("connection refused (injected)")
        return super()._connect()


def test_the_lock_is_waited_for_a_moment(pg_dsn: str) -> None:
    """A killed broker's session may linger briefly: a new broker waits ``lock_wait`` for it."""
    a = PostgresStore(pg_dsn)
    threading.Timer(0.5, a.close).start()
    t0 = time.monotonic()
    b = PostgresStore(pg_dsn, lock_wait=10)
    assert 0.4 < time.monotonic() - t0 < 5
    b.close()


def test_one_transaction_covers_a_whole_batch(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn)
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    with psycopg.connect(pg_dsn, autocommit=True) as probe:
        before = probe.execute("SELECT txid_current()").fetchone()[0]
        for i in range(1, 2001):
            s.enqueue("/", "q", msg(i))
            if i % 2 == 0:
                s.remove("/", "q", i - 1)  # acked before the sync: never written
        s.sync(1)
        after = probe.execute("SELECT txid_current()").fetchone()[0]
        # one transaction id for the sync, one for the probe itself
        assert after - before == 2
        assert probe.execute("SELECT count(*) FROM sansmq.queue_messages").fetchone()[0] == 1000
        assert probe.execute("SELECT count(*) FROM sansmq.messages").fetchone()[0] == 1000
    s.close()


def test_the_loop_never_waits_for_the_database(pg_dsn: str) -> None:
    """While a sync is stuck in the database, appends on the loop thread still return at once."""
    s = PostgresStore(pg_dsn)
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    entered, release = threading.Event(), threading.Event()
    real_write = s._write

    def slow_write(conn, batch):
        entered.set()
        release.wait(10)
        real_write(conn, batch)

    s._write = slow_write  # type: ignore[method-assign]
    s.enqueue("/", "q", msg(1))
    t = threading.Thread(target=s.sync, args=(1,))
    t.start()
    assert entered.wait(5)
    t0 = time.perf_counter()
    for i in range(2, 2002):
        s.enqueue("/", "q", msg(i))
    s.remove("/", "q", 1)
    assert time.perf_counter() - t0 < 0.5  # no round trip per call: the sync holds the connection
    release.set()
    t.join()
    s.sync(2)
    s.close()
    rec = PostgresStore(pg_dsn).recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == list(range(2, 2002))


def test_a_connection_lost_while_idle_is_replaced_transparently(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn)
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    pid = backend_pid(s)
    terminate(pg_dsn, pid)  # e.g. the server restarted between two syncs
    s.enqueue("/", "q", msg(1))
    s.sync(1)
    assert backend_pid(s) != pid
    s.close()
    assert [sm.message.id for sm in PostgresStore(pg_dsn).recover().messages[("/", "q")]] == [1]


def test_unreachable_server_refuses_new_messages_then_reconnects(pg_dsn: str) -> None:
    s = FlakyStore(pg_dsn, retry_interval=0.05)
    s.add_queue(QueueDef("/", "q"))
    s.enqueue("/", "q", msg(1))
    s.enqueue("/", "q", msg(2))
    s.sync(1)
    s.enqueue("/", "q", msg(3))
    s.down = True
    terminate(pg_dsn, backend_pid(s))
    with pytest.raises(StoreError, match="cannot commit"):
        s.sync(2)  # the commit did not happen: the receipt for 3 is never sent
    with pytest.raises(StoreError, match="unavailable"):
        s.enqueue("/", "q", msg(4))  # publishers are refused at once, without waiting for a sync
    s.remove("/", "q", 1)  # acks are still taken
    time.sleep(0.3)
    assert s._failed is not None  # the retry thread keeps trying...
    s.down = False
    wait_until(lambda: s._failed is None)  # ...and reconnects, committing the backlog
    s.enqueue("/", "q", msg(5))
    s.sync(3)
    s.close()
    rec = PostgresStore(pg_dsn).recover()
    assert [sm.message.id for sm in rec.messages[("/", "q")]] == [2, 3, 5]


def test_unreachable_database_refuses_publishers_keeps_consumers(pg_dsn: str) -> None:
    """The broker in a simulation: the server goes away, a persistent SEND gets an ERROR (no
    receipt), the consumer's ack still works, and once the server is back (the retry thread
    reconnects) publishing works and a restart finds the confirmed state."""
    store = FlakyStore(pg_dsn, retry_interval=0.05)
    net = new_net(store)
    p, c = connected(net), connected(net)
    subscribe(c, "/queue/e", "s", ack="client-individual")
    send(p, "/queue/e", b"before", persistent="true", receipt="r0")
    net.run_until_idle()
    assert [r.headers["receipt-id"] for r in split(p.events())[1]] == ["r0"]
    (before,), _, _ = split(c.events())
    store.down = True
    terminate(pg_dsn, backend_pid(store))
    send(p, "/queue/e", b"lost?", persistent="true", receipt="r1")
    net.run_until_idle()
    _, rcpts, errs = split(p.events())
    assert not rcpts and errs  # the sync failed: never confirmed
    c.send(Ack({"id": before.headers["ack"]}))  # a receipt would wait for a commit: none asked
    net.run_until_idle()
    cmsgs, _, cerrs = split(c.events())
    assert not cerrs and [m.body for m in cmsgs] == [b"lost?"]  # the consumer is still served
    p2 = connected(net)
    send(p2, "/queue/e", b"refused", persistent="true", receipt="r2")
    net.run_until_idle()
    _, rcpts, errs = split(p2.events())
    assert not rcpts and errs and "store" in errs[0].headers["message"]
    store.down = False  # the server is back: the retry thread reconnects and commits the backlog
    wait_until(lambda: store._failed is None)
    p3 = connected(net)
    send(p3, "/queue/e", b"after", persistent="true", receipt="r3")
    net.run_until_idle()
    assert [r.headers["receipt-id"] for r in split(p3.events())[1]] == ["r3"]
    store.close()
    net = new_net(PostgresStore(pg_dsn))
    c = connected(net)
    subscribe(c, "/queue/e", "s")
    net.run_until_idle()
    got = [m.body for m in split(c.events())[0]]
    assert b"after" in got and b"before" not in got and b"refused" not in got


def test_a_broker_that_lost_its_lock_to_another_is_refused(pg_dsn: str) -> None:
    a = PostgresStore(pg_dsn, retry_interval=3600)
    a.add_queue(QueueDef("/", "q"))
    a.sync(0)
    terminate(pg_dsn, backend_pid(a))  # a's session (and its advisory lock) is gone
    b = PostgresStore(pg_dsn)  # so a second broker may take the database over
    a.enqueue("/", "q", msg(1))
    with pytest.raises(StoreError, match="in use by another"):
        a.sync(1)  # a reconnects but cannot take the lock again: nothing of it is written
    with pytest.raises(StoreError):
        a.enqueue("/", "q", msg(2))
    a.close()
    assert b.recover().queues[0].name == "q"
    b.close()


def test_schema_lives_beside_user_tables_and_sync_off(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.queues (mine int)")
        conn.execute("INSERT INTO public.queues VALUES (42)")
    s = PostgresStore(pg_dsn, sync=False)
    assert s._conn is not None
    assert s._conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"
    s.add_queue(QueueDef("/", "q"))
    s.sync(0)
    s.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT mine FROM public.queues").fetchall() == [(42,)]
        tables = {r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'sansmq'")}
    assert tables == {"vhosts", "exchanges", "queues", "bindings", "messages", "queue_messages", "docs",
                      "streams", "stream_segments", "stream_records", "stream_tracking", "stream_chunks"}
    s = PostgresStore(pg_dsn)
    assert s._conn is not None and s._conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    assert [q.name for q in s.recover().queues] == ["q"]
    s.close()


def test_recovery_drops_entries_without_a_message_and_unreferenced_rows(pg_dsn: str) -> None:
    s = PostgresStore(pg_dsn)
    s.add_queue(QueueDef("/", "q"))
    for i in (1, 2, 3):
        s.enqueue("/", "q", msg(i))
    s.sync(0)
    s.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM sansmq.messages WHERE id = 2")
        conn.execute("INSERT INTO sansmq.messages VALUES (99, '\\x00')")  # referenced by nothing
        conn.execute("INSERT INTO sansmq.queue_messages VALUES (77, 1, 0)")  # a queue that is gone
    s = PostgresStore(pg_dsn)
    assert [sm.message.id for sm in s.recover().messages[("/", "q")]] == [1, 3]
    assert s.dropped_on_recovery == 1
    s.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM sansmq.messages WHERE id = 99").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM sansmq.queue_messages WHERE queue = 77").fetchone()[0] == 0


def test_unreachable_server_at_open_is_a_store_error() -> None:
    with pytest.raises(StoreError, match="PostgreSQL store"):
        PostgresStore("postgresql://nobody@127.0.0.1:1/none")
