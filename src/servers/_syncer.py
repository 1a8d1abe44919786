"""``SyncWorker``: the one thread that runs the store's fsyncs for a thread-based adapter.

A dedicated thread instead of an executor: no future or callback objects per sync, and tokens that
arrive while a sync runs are coalesced, so the next sync starts as soon as the current one ends and
covers all of them (the store's ``sync`` makes everything appended so far durable, a superset of
any token's writes; the broker releases every receipt up to the token it is told about).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["SyncWorker"]


class SyncWorker:
    """Runs ``run_sync(token)`` for the highest token requested, one at a time, off the loop, then
    hands ``(token, exception or None)`` to ``done`` (which must itself hop back to the loop)."""

    def __init__(self, run_sync: Callable[[int], None],
                 done: Callable[[int, BaseException | None], None]) -> None:
        self._run_sync = run_sync
        self._done = done
        self._cond = threading.Condition(threading.Lock())
        self._wanted = 0  # highest token requested
        self._busy = False
        self._closing = False
        self._thread: threading.Thread | None = None

    def request(self, token: int) -> None:
        """Ask for a sync covering ``token`` (called on the loop thread)."""
        with self._cond:
            if token > self._wanted:
                self._wanted = token
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="sansmq-sync", daemon=True)
                self._thread.start()
            elif not self._busy:
                self._cond.notify()

    def close(self) -> None:
        """Finish the syncs requested so far, then stop the thread (waits for it)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _loop(self) -> None:
        done_token = 0
        cond = self._cond
        while True:
            with cond:
                self._busy = False
                while self._wanted <= done_token and not self._closing:
                    cond.wait()
                if self._wanted <= done_token:
                    return  # closing, nothing left
                token = done_token = self._wanted
                self._busy = True
            try:
                self._run_sync(token)
            except BaseException as exc:  # noqa: BLE001 - handed to the loop
                self._done(token, exc)
            else:
                self._done(token, None)
