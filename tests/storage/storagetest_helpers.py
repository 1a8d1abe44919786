"""Helpers for the storage tests: a broker over a SegmentStore in a SimNetwork, and a store with
injectable I/O faults."""

from __future__ import annotations

import errno
import random
from typing import Any

from engine import Broker, Config
from engine._message import Message as StoreMessage
from engine.segment_store import SegmentStore
from engine.testing import SimClient, SimNetwork
from stompproto import Connected, Error, Message, Receipt, Send, Subscribe


class FaultyStore(SegmentStore):
    """A SegmentStore whose writes / fsyncs raise ``OSError(ENOSPC)`` (or ``EIO``) while told to."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        self.fail_writes = 0  # -1: until cleared
        self.fail_fsyncs = 0
        self.short_write = False  # write half of the first failing chunk before raising
        super().__init__(*args, **kw)

    def _pwrite(self, fd: int, data: bytearray, offset: int) -> int:
        if self.fail_writes:
            if self.short_write and len(data) > 1:  # a partial write first, then the error
                self.short_write = False
                return super()._pwrite(fd, data[: len(data) // 2], offset)
            if self.fail_writes > 0:
                self.fail_writes -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return super()._pwrite(fd, data, offset)

    def _fsync(self, fd: int) -> None:
        self._maybe_fail_fsync()
        super()._fsync(fd)

    def _fsync_full(self, fd: int) -> None:
        self._maybe_fail_fsync()
        super()._fsync_full(fd)

    def _maybe_fail_fsync(self) -> None:
        if self.fail_fsyncs:
            if self.fail_fsyncs > 0:
                self.fail_fsyncs -= 1
            raise OSError(errno.EIO, "Input/output error")


def new_net(store: Any, seed: int = 0, **kw: Any) -> SimNetwork:
    return SimNetwork(Broker(Config(), store, random.Random(seed)), seed=seed, **kw)


def connected(net: SimNetwork) -> SimClient:
    client = net.connect()
    frame = client.stomp_connect(None, version="1.2")
    assert isinstance(frame, Connected), frame
    client.events()
    return client


def send(client: SimClient, dest: str, body: bytes = b"", **headers: str) -> None:
    h = {"destination": dest}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    client.send(Send(h, body))


def subscribe(client: SimClient, dest: str, sub_id: str, ack: str = "auto", **headers: str) -> None:
    h = {"destination": dest, "id": sub_id, "ack": ack}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    client.send(Subscribe(h))


def split(events: list[Any]) -> tuple[list[Message], list[Receipt], list[Error]]:
    return ([e for e in events if isinstance(e, Message)], [e for e in events if isinstance(e, Receipt)],
            [e for e in events if isinstance(e, Error)])


def kill(store: SegmentStore) -> None:
    """The process dies: buffered (unsynced) data is lost, what was written to the OS stays."""
    import os

    for f in store._segs.values():
        os.close(f.fd)
    store._segs.clear()
    if store._j is not None:
        os.close(store._j.fd)
        store._j = None
    os.close(store._lock_fd)
    store._lock_fd = -1


def msg(i: int, body: bytes = b"", **kw: Any) -> StoreMessage:
    """A persistent message for store-level tests: id ``i``, one header, a body naming it."""
    return StoreMessage(i, "", "q", {"n": i}, body or b"body-%d" % i, persistent=True, **kw)


def apply_op(store: Any, model: dict[int, int], op: str, k: int, count: int, next_id: int) -> int:
    """One step of a random store workload on queue "q", mirrored in ``model`` (id -> delivery
    count): "e" enqueues a new message, "r" removes and "c" recounts the k-th live one. Returns the
    last id used."""
    if op == "e":
        next_id += 1
        store.enqueue("/", "q", msg(next_id))
        model[next_id] = 0
    elif op == "r" and model:
        mid = sorted(model)[k % len(model)]
        store.remove("/", "q", mid)
        del model[mid]
    elif op == "c" and model:
        mid = sorted(model)[k % len(model)]
        store.update_delivery("/", "q", mid, count)
        model[mid] = count
    return next_id
