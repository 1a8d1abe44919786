"""threads+epoll adapter: one I/O thread owns the broker and every socket.

The thread polls a level-triggered ``select.epoll`` with the broker's timer as the timeout.
Sockets are non-blocking; each connection keeps one ``bytearray`` of unsent bytes. The fsync
worker thread (and :meth:`stop`, from any thread or a signal handler) reach the I/O thread
through a queue plus an eventfd. data_sent is the return value of ``socket.send``.

Syncs: the broker's ``Sync`` tokens of one poll round are coalesced and started once the round is
handled. When no socket is ready by then (the loop would sleep anyway) and the disk's syncs are
fast, the I/O thread runs the fsync itself and releases the receipts/confirms at once: no thread
hand-off, no second wake-up, which is most of a one-at-a-time receipt's cost besides the disk.
Input that is ready gets one more round first (a consumer's ack, say, joins the same sync); when
input is still waiting after it, when the worker is still syncing, or when syncs are slow, the
worker takes the sync, so reading goes on during the fsync and everything requested meanwhile
shares the worker's next sync (group commit).
"""

from __future__ import annotations

import os
import queue
import select
import socket
import time
from collections.abc import Callable
from typing import Any

from ._driver import Driver, Listener, ReadyCallback
from ._sockets import ACCEPT_RETRY_DELAY, READ_SIZE, accept_ready, bind_listeners
from ._syncer import SyncWorker

__all__ = ["ThreadsServer"]

#: a sync runs on the I/O thread only while syncs take less than this (a moving average): a slow
#: disk must not stall every other connection for the length of its fsync
INLINE_SYNC_LIMIT = 0.002
IN, OUT, ERR, HUP = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR, select.EPOLLHUP


class _Conn:
    __slots__ = ("conn_id", "sock", "fd", "out", "reading", "closing", "eof", "mask")

    def __init__(self, conn_id: int, sock: socket.socket) -> None:
        self.conn_id = conn_id
        self.sock = sock
        self.fd = sock.fileno()
        self.out = bytearray()
        self.reading = True
        self.closing = False
        self.eof = False
        self.mask = IN


class ThreadsServer(Driver):
    kind = "threads"

    def __init__(self, broker: Any, listeners: list[Listener]) -> None:
        super().__init__(broker, listeners)
        self.conns: dict[int, _Conn] = {}  # by conn_id
        self._by_fd: dict[int, _Conn] = {}
        self._listen: dict[int, tuple[socket.socket, str]] = {}
        self._closing: dict[int, float] = {}  # conn_id -> monotonic deadline to force the close
        self._accept_retry = 0.0  # monotonic time to poll the listeners again (0: polling)
        self._ep = select.epoll()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._run = True
        self._drain_until = 0.0  # monotonic end of a graceful stop's wait (0: serving)
        self._syncer = SyncWorker(broker.run_sync,
                                  lambda token, exc: self._post(lambda: self._worker_done(token, exc)))
        self._sync_wanted = 0  # highest token of this poll round not handed to a sync yet (0: none)
        self._sync_deferred = False  # the wanted sync already waited one round for ready input
        self._worker_wanted = 0  # highest token handed to the worker
        self._worker_synced = 0  # highest token the worker reported done
        self._worker_started = 0.0  # monotonic start of the worker's current sync
        self._sync_seconds = 0.0  # moving average of a sync's wall time (INLINE_SYNC_LIMIT)
        self._ready: list[tuple[int, int]] = []  # events of a zero-timeout poll, handled next round

    # -- cross-thread ----------------------------------------------------------------------------
    def _post(self, fn: Callable[[], None]) -> None:
        self._inbox.put(fn)
        os.eventfd_write(self._wake, 1)

    def _post_soon(self, fn: Callable[[], None]) -> None:
        if not self._run:
            raise RuntimeError("the threads server is not running")
        self._post(fn)

    def stop(self) -> None:
        self._post(self._request_stop)

    def _request_stop(self) -> None:
        if self._drain_until:
            return
        for fd, (lsock, _) in self._listen.items():
            self._ep.unregister(fd)
            lsock.close()
        self._listen.clear()
        self._accept_retry = 0.0
        self._drain_until = time.monotonic() + self.shutdown_timeout
        if not self._close_clients():
            self._run = False

    # -- primitives ------------------------------------------------------------------------------
    def _update(self, conn: _Conn) -> None:
        mask = (IN if conn.reading else 0) | (OUT if conn.out else 0)
        if mask != conn.mask:
            conn.mask = mask
            self._ep.modify(conn.fd, mask)

    def _send(self, conn_id: int, data: bytes) -> None:
        conn = self.conns.get(conn_id)
        if conn is None:
            return
        if conn.out:  # already waiting for EPOLLOUT: just keep the order
            conn.out += data
            return
        # straight from the batch to the socket: only what the kernel does not take is copied
        try:
            n = conn.sock.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self._drop(conn)
            return
        if n:
            self.sent(conn_id, n)
        if n < len(data):
            conn.out += memoryview(data)[n:]
            self._update(conn)
        elif conn.closing:
            self._drop(conn)

    def _flush(self, conn: _Conn) -> None:
        try:
            n = conn.sock.send(conn.out)
        except BlockingIOError:
            return
        except OSError:
            self._drop(conn)
            return
        del conn.out[:n]
        self.sent(conn.conn_id, n)
        if conn.closing and not conn.out:
            self._drop(conn)
        else:
            self._update(conn)

    def _close(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is None or conn.closing:
            return
        conn.closing = True
        conn.reading = False
        if conn.out:
            self._update(conn)
            self._closing[conn_id] = time.monotonic() + self.close_timeout  # insertion = time order
        else:
            self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        """Close the socket now; the broker hears connection_lost at the next pump()."""
        if self.conns.pop(conn.conn_id, None) is None:
            return
        self._closing.pop(conn.conn_id, None)
        del self._by_fd[conn.fd]
        self._ep.unregister(conn.fd)
        conn.sock.close()
        self.gone(conn.conn_id)

    def _pause(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None and not conn.closing:
            conn.reading = False
            self._update(conn)

    def _resume(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None and not conn.closing and not conn.eof:
            conn.reading = True
            self._update(conn)

    def _start_sync(self, token: int) -> None:
        if token > self._sync_wanted:
            self._sync_wanted = token  # started when this poll round is handled: see _run_syncs

    def _run_syncs(self) -> None:
        """Start the sync this poll round asked for: inline or on the worker (module docstring)."""
        while self._sync_wanted:
            token, self._sync_wanted = self._sync_wanted, 0
            if (self._worker_synced < self._worker_wanted or self._stopping
                    or self._sync_seconds > INLINE_SYNC_LIMIT):
                self._to_worker(token)  # one sync at a time; the worker coalesces what comes
                return
            ready = self._ep.poll(0, 1024)
            if ready:
                self._ready = ready
                if self._sync_deferred:  # still busy after one more round: overlap the sync
                    self._to_worker(token)
                else:  # handle what is waiting first, then look again
                    self._sync_deferred = True
                    self._sync_wanted = token
                return
            self._sync_deferred = False
            started = time.monotonic()
            try:
                self.broker.run_sync(token)
            except Exception as exc:  # noqa: BLE001 - reported like the worker's failures
                self._sync_done(token, exc)
            else:
                self._timed_sync(started)
                self._sync_done(token, None)  # may ask for the next sync: the loop goes round

    def _timed_sync(self, started: float) -> None:
        self._sync_seconds += (time.monotonic() - started - self._sync_seconds) / 8

    def _to_worker(self, token: int) -> None:
        self._sync_deferred = False
        if self._worker_synced >= self._worker_wanted:
            self._worker_started = time.monotonic()
        self._worker_wanted = max(self._worker_wanted, token)
        self._syncer.request(token)

    def _worker_done(self, token: int, exc: BaseException | None) -> None:
        self._worker_synced = max(self._worker_synced, token)
        if exc is None:
            self._timed_sync(self._worker_started)  # hand-offs included: errs towards the worker
            self._worker_started = time.monotonic()
        self._sync_done(token, exc)

    def _arm_timer(self, deadline: float | None) -> None:
        pass  # the poll loop reads self._deadline before every poll

    # -- events ----------------------------------------------------------------------------------
    def _accept(self, lsock: socket.socket, protocol: str) -> None:
        accepted, exhausted = accept_ready(lsock)
        if exhausted:
            self._ep.modify(lsock.fileno(), 0)
            self._accept_retry = time.monotonic() + ACCEPT_RETRY_DELAY
        for sock, peer in accepted:
            conn = _Conn(self.new_conn_id(), sock)
            self.conns[conn.conn_id] = conn
            self._by_fd[conn.fd] = conn
            self._ep.register(conn.fd, IN)
            self.call(self.broker.connection_made, conn.conn_id, protocol, peer, time.time())

    def _on_event(self, conn: _Conn, ev: int) -> None:
        if ev & ERR or (ev & HUP and not conn.reading):
            self._drop(conn)
        else:
            if ev & OUT and conn.out:
                self._flush(conn)
            if ev & (IN | HUP) and conn.reading and conn.conn_id in self.conns:
                try:
                    data = conn.sock.recv(READ_SIZE)
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    self._drop(conn)
                else:
                    if not data:  # peer half-closed: stop polling for input
                        conn.reading, conn.eof = False, True
                        self._update(conn)
                    self.broker.data_received(conn.conn_id, data, time.time())
        self.pump()

    # -- lifecycle -------------------------------------------------------------------------------
    def serve_forever(self, ready: ReadyCallback | None = None) -> None:
        try:
            bound = bind_listeners(self.listeners, self.recv_buffer)
            for lsock, lst in bound:
                self._listen[lsock.fileno()] = (lsock, lst.protocol)
                self._ep.register(lsock.fileno(), IN)
            self._ep.register(self._wake, IN)
            self.pump()
            self._announce([lst for _, lst in bound], ready)
            self._loop()
        finally:
            for lsock, _ in self._listen.values():
                lsock.close()
            conns = list(self.conns.values())
            for conn in conns:
                conn.sock.close()
            self.conns.clear()
            self._by_fd.clear()
            self._stop_all([c.conn_id for c in conns])
            self._syncer.close()
            self._ep.close()
            os.close(self._wake)

    def _poll_timeout(self) -> float:
        """Seconds until the broker's timer, a forced close or an accept retry (-1: none)."""
        if self._sync_wanted:
            return 0.0
        mono = [self._accept_retry, next(iter(self._closing.values()), 0.0), self._drain_until]
        due = [when - time.monotonic() for when in mono if when]
        if self._deadline is not None:
            due.append(self._deadline - time.time())
        return max(0.0, min(due)) if due else -1.0

    def _expire_closing(self) -> None:
        now = time.monotonic()
        expired = [cid for cid, when in self._closing.items() if when <= now]
        for cid in expired:
            self._drop(self.conns[cid])
        if expired:
            self.pump()

    def _loop(self) -> None:
        ep, by_fd, listen, wake = self._ep, self._by_fd, self._listen, self._wake
        while self._run:
            ready, self._ready = self._ready, []
            for fd, ev in ready or ep.poll(self._poll_timeout(), 1024):
                conn = by_fd.get(fd)
                if conn is not None:
                    self._on_event(conn, ev)
                elif fd == wake:
                    os.eventfd_read(wake)
                    while not self._inbox.empty():
                        self._inbox.get_nowait()()
                elif fd in listen:
                    self._accept(*listen[fd])
            if self._closing:
                self._expire_closing()
            if self._accept_retry and time.monotonic() >= self._accept_retry:
                self._accept_retry = 0.0
                for fd in listen:
                    ep.modify(fd, IN)
            if self._deadline is not None and time.time() >= self._deadline:
                self._deadline = None  # pump() re-arms from get_timer()
                self.call(self.broker.handle_timer, time.time())
            if self._sync_wanted:
                self._run_syncs()
            if self._drain_until and (not self.conns or time.monotonic() >= self._drain_until):
                self._run = False
