"""``Forwarders``: one sender thread per leader node for the messages this node forwards to it.

The store's sync hands each leader's batch here and goes on to its own commit at once: a node's
commit never waits for a peer, which would deadlock two nodes forwarding to each other (a leader
confirms a forwarded publish only after its own sync). The thread publishes the batch over the
link (``Links.send``: returns once the leader confirmed, i.e. committed, every message) and reports
the outcome through ``report`` (the node hops to the loop: ``engine.cluster.forward.settle_forwards``).
One thread per leader keeps each queue's messages in their order; batches waiting meanwhile go
out together (one confirm wait for all of them).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from itertools import groupby
from typing import Any

from engine._message import Message
from engine.store import StoreError

__all__ = ["Forwarders"]

log = logging.getLogger("sansmq.cluster")

_Batch = tuple[str, list[Any]]  # (vhost, forwards: storage.postgres.cluster._Forward)


class Forwarders:
    """Sender threads, one per leader, started on its first batch; ``send`` is ``Links.send``."""

    def __init__(self, send: Callable[[str, str, list[tuple[str, Message]]], None]) -> None:
        self.send = send
        #: called (on a sender thread) with a batch's forwards and None (confirmed) or the failure
        self.report: Callable[[list[Any], StoreError | None], None] = lambda items, error: None
        self._queues: dict[str, queue.SimpleQueue[_Batch | None]] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def dispatch(self, leader: str, vhost: str, items: list[Any]) -> None:
        """Send ``items`` to ``leader`` (the store's sync thread): queued, never waited for."""
        with self._lock:
            if self._closed:
                closed = True
            else:
                closed = False
                q = self._queues.get(leader)
                if q is None:
                    q = self._queues[leader] = queue.SimpleQueue()
                    thread = threading.Thread(target=self._run, args=(leader, q), daemon=True,
                                              name=f"sansmq-forward-{leader}")
                    self._threads.append(thread)
                    thread.start()
                q.put((vhost, items))
        if closed:
            self.report(items, StoreError(f"forwarding to cluster node {leader}: this node is stopping"))

    def _run(self, leader: str, q: queue.SimpleQueue[_Batch | None]) -> None:
        stopping = False
        while not stopping:
            batch = q.get()
            if batch is None:
                return
            batches = [batch]
            while True:  # what queued up meanwhile goes out with it
                try:
                    more = q.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                batches.append(more)
            for vhost, group in groupby(batches, key=lambda b: b[0]):
                items = [item for _, part in group for item in part]
                error: StoreError | None = None
                try:
                    self.send(leader, vhost, [(item.queue, item.msg) for item in items])
                except StoreError as exc:
                    error = exc
                    log.warning("cluster: %s (%d messages; publishers nacked, dead letters kept)", exc, len(items))
                except Exception as exc:  # noqa: BLE001 - a bug must not leave publishers waiting
                    log.exception("cluster: forwarding to node %s failed", leader)
                    error = StoreError(f"forwarding to cluster node {leader}: {exc!r}")
                self.report(items, error)

    def close(self) -> None:
        """Send what is queued, then stop the threads (waits a bounded time for each)."""
        with self._lock:
            self._closed = True
            queues, threads = list(self._queues.values()), list(self._threads)
        for q in queues:
            q.put(None)
        for thread in threads:
            thread.join(5)
