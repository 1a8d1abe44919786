"""End to end with stomp.py against each server: a persistent SEND's RECEIPT comes only after the
store's fsync covering it returned, and what was receipted is there after a restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import stomp

import servers
from engine.segment_store import SegmentStore
from servers import make_broker, running


class GatedStore(SegmentStore):
    """``sync`` waits for the test to open the gate, and records when it returned."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self.gate = threading.Event()
        self.synced_at: list[float] = []

    def sync(self, token: int) -> None:
        self.gate.wait(10)
        super().sync(token)
        self.synced_at.append(time.monotonic())


class Listener(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.receipts: dict[str, float] = {}
        self.messages: list[bytes] = []
        self.errors: list[str] = []
        self.cond = threading.Condition()

    def on_receipt(self, frame) -> None:
        with self.cond:
            self.receipts[frame.headers["receipt-id"]] = time.monotonic()
            self.cond.notify_all()

    def on_message(self, frame) -> None:
        with self.cond:
            self.messages.append(frame.body if isinstance(frame.body, bytes) else frame.body.encode())
            self.cond.notify_all()

    def on_error(self, frame) -> None:
        with self.cond:
            self.errors.append(frame.headers.get("message", ""))
            self.cond.notify_all()

    def wait(self, pred, timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(pred, timeout)


def connect(addr):
    conn = stomp.Connection([addr], heartbeats=(0, 0), auto_decode=False)
    lst = Listener()
    conn.set_listener("t", lst)
    conn.connect(wait=True)
    return conn, lst


@pytest.mark.parametrize("kind", servers.SERVER_KINDS)
def test_receipt_waits_for_fsync_and_message_survives_restart(kind: str, tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    store.gate.set()
    with running(kind, broker=make_broker(store=store)) as srv:
        conn, lst = connect(srv.address())
        conn.send("/queue/dur", b"", headers={"receipt": "declare"})
        assert lst.wait(lambda: "declare" in lst.receipts)
        store.gate.clear()
        for i in range(3):
            conn.send("/queue/dur", b"m%d" % i, headers={"persistent": "true", "receipt": f"r{i}"})
        time.sleep(0.3)
        assert not any(f"r{i}" in lst.receipts for i in range(3))  # held: the fsync has not run
        n0 = len(store.synced_at)
        store.gate.set()
        assert lst.wait(lambda: all(f"r{i}" in lst.receipts for i in range(3)))
        assert len(store.synced_at) > n0
        assert min(lst.receipts[f"r{i}"] for i in range(3)) >= store.synced_at[n0]
        conn.disconnect()
    store.close()
    store = SegmentStore(tmp_path)  # a restart: the receipted messages are there, in order
    with running(kind, broker=make_broker(store=store)) as srv:
        conn, lst = connect(srv.address())
        conn.subscribe("/queue/dur", id="s", ack="auto")
        assert lst.wait(lambda: len(lst.messages) >= 3)
        time.sleep(0.1)
        assert lst.messages == [b"m0", b"m1", b"m2"]  # the transient declaring SEND did not survive
        conn.disconnect()
    store.close()
