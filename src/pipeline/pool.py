"""One AMQP connection per executor process, reused by the tasks it runs one after another.

A Spark executor's Python worker runs one task at a time and is reused for the next
(``spark.python.worker.reuse``, the default), so a connection opened by one range read can serve
the next instead of a TCP and AMQP handshake per task per batch. A task takes a connection out of
the pool (no other thread can use it meanwhile) and gives it back only if it finished its work
with the channel in a known state (the range reader cancels its consumer and settles what came
after); on any error, or if the task stops early, the connection is closed instead. A connection
the broker dropped while idle reconnects by itself (``sansmq_client``); one that fails in use is
closed, and the reader's retries answer with a new one.

The pool is per process by nature (that is what outlives a task): ``EXECUTOR_POOL``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sansmq_client import sync

__all__ = ["ConnectionPool", "EXECUTOR_POOL"]

#: idle connections kept per broker URL: a worker runs one task at a time, so one is the norm
MAX_IDLE = 2


class ConnectionPool:
    def __init__(self) -> None:
        self._idle: dict[tuple[str, float], list[sync.Connection]] = {}
        self._lock = threading.Lock()
        #: connections this pool opened (for tests and metrics)
        self.opened = 0

    @contextmanager
    def client(self, url: str, timeout: float) -> Iterator[sync.Connection]:
        """A connection to ``url`` for one piece of work: an idle one if there is, else a new one;
        back to the pool when the work returns, closed if it raises (or the generator using it
        is closed early)."""
        key = (url, timeout)
        with self._lock:
            idle = self._idle.get(key)
            client = idle.pop() if idle else None
        if client is None:
            client = sync.connect(url, connect_timeout=timeout, name="sansmq pipeline")
            with self._lock:
                self.opened += 1
        try:
            yield client
        except BaseException:
            client.close()
            raise
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < MAX_IDLE:
                idle.append(client)
                return
        client.close()

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            clients = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for c in clients:
            c.close()


EXECUTOR_POOL = ConnectionPool()
