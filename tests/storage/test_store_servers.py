"""Each durable store under each server, with real clients: a STOMP RECEIPT (stomp.py) and an AMQP
publisher confirm (pika) come only after the store's sync (the fsync / the PostgreSQL COMMIT)
returned, and what was confirmed is there after a broker restart."""

from __future__ import annotations

import threading
import time
from typing import Any

import pika
import pytest
import stomp

import servers
from servers import make_broker, running

LISTENERS = (("stomp", "127.0.0.1", 0), ("amqp", "127.0.0.1", 0))


def gate(store: Any) -> tuple[threading.Event, list[float]]:
    """``store.sync`` waits for the returned event, and records when it returned."""
    opened = threading.Event()
    done: list[float] = []
    real = store.sync

    def sync(token: int) -> None:
        opened.wait(10)
        real(token)
        done.append(time.monotonic())

    store.sync = sync  # the servers call broker.store.sync: the instance attribute wins
    return opened, done


class Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.receipts: dict[str, float] = {}
        self.messages: list[bytes] = []
        self.acks: list[str] = []  # the ack header of each MESSAGE
        self.errors: list[str] = []
        self.cond = threading.Condition()

    def on_receipt(self, frame) -> None:
        with self.cond:
            self.receipts[frame.headers["receipt-id"]] = time.monotonic()
            self.cond.notify_all()

    def on_message(self, frame) -> None:
        with self.cond:
            self.messages.append(frame.body if isinstance(frame.body, bytes) else frame.body.encode())
            self.acks.append(frame.headers.get("ack", ""))
            self.cond.notify_all()

    def on_error(self, frame) -> None:
        with self.cond:
            self.errors.append(frame.headers.get("message", ""))
            self.cond.notify_all()

    def wait(self, pred, timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout)


def stomp_connect(addr):
    conn = stomp.Connection12([addr], heartbeats=(0, 0), auto_decode=False, vhost="/")
    lst = Listener()
    conn.set_listener("t", lst)
    conn.connect("guest", "guest", wait=True)
    return conn, lst


def pika_connect(addr) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.ConnectionParameters(
        addr[0], addr[1], credentials=pika.PlainCredentials("guest", "guest"), heartbeat=0))


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_stomp_receipt_waits_for_the_store_and_survives_restart(kind: str, store_factory) -> None:
    store = store_factory.open()
    opened, done = gate(store)
    opened.set()
    with running(kind, LISTENERS, broker=make_broker(store=store)) as srv:
        conn, lst = stomp_connect(srv.address())
        conn.send("/queue/dur", b"", headers={"receipt": "declare"})
        assert lst.wait(lambda: "declare" in lst.receipts)
        opened.clear()
        for i in range(3):
            conn.send("/queue/dur", b"m%d" % i, headers={"persistent": "true", "receipt": f"r{i}"})
        time.sleep(0.3)
        assert not any(f"r{i}" in lst.receipts for i in range(3))  # held: nothing committed yet
        n0 = len(done)
        opened.set()
        assert lst.wait(lambda: all(f"r{i}" in lst.receipts for i in range(3)))
        assert len(done) > n0 and min(lst.receipts[f"r{i}"] for i in range(3)) >= done[n0]
        conn.disconnect()
    store.close()
    store = store_factory.open()  # a restart: the receipted messages are there, in order
    with running(kind, LISTENERS, broker=make_broker(store=store)) as srv:
        conn, lst = stomp_connect(srv.address())
        conn.subscribe("/queue/dur", id="s", ack="auto")
        assert lst.wait(lambda: len(lst.messages) >= 3)
        time.sleep(0.1)
        assert lst.messages == [b"m0", b"m1", b"m2"]  # the transient declaring SEND did not survive
        conn.disconnect()
    store.close()


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_amqp_confirm_waits_for_the_store_and_survives_restart(kind: str, store_factory) -> None:
    store = store_factory.open()
    opened, done = gate(store)
    opened.set()
    with running(kind, LISTENERS, broker=make_broker(store=store)) as srv:
        conn = pika_connect(srv.address("amqp"))
        ch = conn.channel()
        ch.queue_declare("durq", durable=True)
        ch.confirm_delivery()
        opened.clear()
        confirmed: list[float] = []

        def publish() -> None:
            for i in range(3):  # each basic_publish returns once its confirm arrived
                ch.basic_publish("", "durq", b"a%d" % i, pika.BasicProperties(delivery_mode=2))
            confirmed.append(time.monotonic())

        t = threading.Thread(target=publish)
        t.start()
        t.join(0.5)
        assert t.is_alive() and not confirmed  # no confirm before the commit
        n0 = len(done)
        opened.set()
        t.join(10)
        assert confirmed and len(done) > n0 and confirmed[0] >= done[n0]
        conn.close()
    store.close()
    store = store_factory.open()
    with running(kind, LISTENERS, broker=make_broker(store=store)) as srv:
        conn = pika_connect(srv.address("amqp"))
        ch = conn.channel()
        got = []
        for _ in range(4):
            _, _, body = ch.basic_get("durq", auto_ack=True)
            got.append(body)
        assert got == [b"a0", b"a1", b"a2", None]
        conn.close()
    store.close()
