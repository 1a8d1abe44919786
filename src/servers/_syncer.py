"""``SyncWorker``: the one thread that runs the store's fsyncs for a thread-based adapter.

A dedicated thread instead of an executor: no future or callback objects per sync, and tokens that
arrive while a sync runs are coalesced, so the next sync starts as soon as the current one ends and
covers all of them (the store's ``sync`` makes everything appended so far durable, a superset of
any token's writes; the broker releases every receipt up to the token it is told about). The hand-off
is a ``queue.SimpleQueue`` (one futex wake per request at most; a ``Condition`` costs several).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["SyncWorker"]

_STOP = -1


class SyncWorker:
    """Runs ``run_sync(token)`` for the highest token requested, one at a time, off the loop, then
    hands ``(token, exception or None)`` to ``done`` (which must itself hop back to the loop)."""

    def __init__(self, run_sync: Callable[[int], None],
                 done: Callable[[int, BaseException | None], None]) -> None:
        self._run_sync = run_sync
        self._done = done
        self._requests: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def request(self, token: int) -> None:
        """Ask for a sync covering ``token`` (called on the loop thread)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="sansmq-sync", daemon=True)
            self._thread.start()
        self._requests.put(token)

    def close(self) -> None:
        """Finish the syncs requested so far, then stop the thread (waits for it)."""
        if self._thread is not None:
            self._requests.put(_STOP)
            self._thread.join()
            self._thread = None

    def _loop(self) -> None:
        requests = self._requests
        done_token = 0
        stopping = False
        while not stopping:
            token = requests.get()
            wanted = done_token
            while True:  # coalesce everything requested meanwhile into one sync
                if token == _STOP:
                    stopping = True
                elif token > wanted:
                    wanted = token
                try:
                    token = requests.get_nowait()
                except queue.Empty:
                    break
            if wanted == done_token:
                continue
            done_token = wanted
            try:
                self._run_sync(done_token)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                self._done(done_token, exc)
            else:
                self._done(done_token, None)
