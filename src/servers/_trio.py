"""trio adapter: per connection one reader task and one sender task; one timer task.

Back-pressure: Write appends to the connection's ``bytearray`` and wakes its sender task, which
hands the whole buffer to ``send_all`` and then reports it as data_sent. Pause/ResumeReading
gate the reader between receives (a chunk already received is held until reading resumes).
Times are converted from the broker's wall clock to ``trio.current_time()`` by difference.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import trio

from ._driver import Driver, Listener, ReadyCallback, log
from ._sockets import READ_SIZE, bind_listeners

__all__ = ["TrioServer"]

_GONE = (trio.BrokenResourceError, trio.ClosedResourceError)


class _Conn:
    __slots__ = ("conn_id", "stream", "out", "has_data", "paused", "resumed", "closing", "scope")

    def __init__(self, conn_id: int, stream: trio.SocketStream) -> None:
        self.conn_id = conn_id
        self.stream = stream
        self.out = bytearray()
        self.has_data = trio.Event()
        self.paused = False
        self.resumed = trio.Event()
        self.closing = False
        self.scope: trio.CancelScope | None = None


class TrioServer(Driver):
    kind = "trio"

    def __init__(self, broker: Any, listeners: list[Listener]) -> None:
        super().__init__(broker, listeners)
        self.conns: dict[int, _Conn] = {}
        self._token: trio.lowlevel.TrioToken | None = None
        self._main_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._accept_scope = trio.CancelScope()  # the accept loops: cancelled first on a stop
        self._draining = False
        self._timer_moved = trio.Event()
        self._stop_flag = threading.Event()
        self._sync_queue: deque[int] = deque()
        self._sync_wanted = trio.Event()

    # -- primitives ------------------------------------------------------------------------------
    def _send(self, conn_id: int, data: bytes) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None and not conn.closing:
            conn.out += data
            conn.has_data.set()

    def _close(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None and not conn.closing:
            conn.closing = True
            conn.has_data.set()
            if conn.scope is not None:  # a peer that stopped reading cannot hold us forever
                conn.scope.deadline = trio.current_time() + self.close_timeout

    def _pause(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None and not conn.paused:
            conn.paused = True
            conn.resumed = trio.Event()

    def _resume(self, conn_id: int) -> None:
        conn = self.conns.get(conn_id)
        if conn is not None:
            conn.paused = False
            conn.resumed.set()

    def _start_sync(self, token: int) -> None:
        self._sync_queue.append(token)
        self._sync_wanted.set()

    async def _sync_task(self) -> None:
        # One worker; the tokens queued while a sync ran are coalesced into one sync covering the
        # highest (the store syncs everything appended so far; tokens only grow).
        while True:
            if not self._sync_queue:
                self._sync_wanted = trio.Event()
                await self._sync_wanted.wait()
                continue
            token = max(self._sync_queue)
            self._sync_queue.clear()
            try:
                await trio.to_thread.run_sync(self.broker.run_sync, token)
            except Exception as exc:  # noqa: BLE001 - handed to the broker
                self._sync_done(token, exc)
            else:
                self._sync_done(token, None)

    def _arm_timer(self, deadline: float | None) -> None:
        self._timer_moved.set()

    # -- tasks -----------------------------------------------------------------------------------
    async def _timer_task(self) -> None:
        while True:
            moved = self._timer_moved = trio.Event()
            deadline = self._deadline
            if deadline is None:
                await moved.wait()
                continue
            with trio.move_on_at(trio.current_time() + (deadline - time.time())):
                await moved.wait()
                continue
            self._deadline = None  # pump() re-arms from get_timer()
            self.call(self.broker.handle_timer, time.time())

    async def _accept_loop(self, listener: trio.SocketListener, protocol: str) -> None:
        assert self._nursery is not None
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:  # e.g. EMFILE: keep serving the others, retry soon
                    log.warning("accept failed: %s", exc)
                    await trio.sleep(0.1)
                    continue
                self._nursery.start_soon(self._connection, stream, protocol)

    async def _connection(self, stream: trio.SocketStream, protocol: str) -> None:
        conn = _Conn(self.new_conn_id(), stream)
        self.conns[conn.conn_id] = conn
        try:
            async with trio.open_nursery() as nursery:
                conn.scope = nursery.cancel_scope
                nursery.start_soon(self._sender, conn)
                try:
                    peer = stream.socket.getpeername()
                except OSError:  # already reset by the peer; the reader will notice
                    peer = ()
                self.call(self.broker.connection_made, conn.conn_id, protocol, peer, time.time())
                await self._reader(conn)
        finally:
            await trio.aclose_forcefully(stream)
            if self.conns.pop(conn.conn_id, None) is not None and not self._stopping:
                self.gone(conn.conn_id)
                self.pump()

    async def _reader(self, conn: _Conn) -> None:
        while not conn.closing:
            try:
                data = await conn.stream.receive_some(READ_SIZE)
            except _GONE:
                assert conn.scope is not None
                conn.scope.cancel()
                return
            while conn.paused:
                await conn.resumed.wait()
            if conn.closing:
                return
            self.call(self.broker.data_received, conn.conn_id, data, time.time())
            if not data:
                return  # EOF: the sender lives on until the broker says Close

    async def _sender(self, conn: _Conn) -> None:
        while True:
            if not conn.out:
                if conn.closing:
                    break
                conn.has_data = trio.Event()
                await conn.has_data.wait()
                continue
            data, conn.out = conn.out, bytearray()
            try:
                await conn.stream.send_all(data)
            except _GONE:
                break
            self.sent(conn.conn_id, len(data))
            self.pump()
        assert conn.scope is not None
        conn.scope.cancel()  # closed or broken: stop the reader too

    # -- lifecycle -------------------------------------------------------------------------------
    def serve_forever(self, ready: ReadyCallback | None = None) -> None:
        trio.run(self._main, ready)

    def _post_soon(self, fn: Callable[[], None]) -> None:
        token = self._token
        if token is None:
            raise RuntimeError("the trio server is not running")
        token.run_sync_soon(fn)  # trio.RunFinishedError (a RuntimeError) once it stopped

    def stop(self) -> None:
        self._stop_flag.set()
        token = self._token
        if token is not None:
            try:
                token.run_sync_soon(self._begin_stop)
            except trio.RunFinishedError:
                pass

    def _begin_stop(self) -> None:
        """Stop accepting, send every client its protocol's close, give them a bounded time."""
        if self._draining:
            return
        self._draining = True
        self._accept_scope.cancel()
        if self._nursery is not None and self._close_clients():
            self._nursery.start_soon(self._drain_then_cancel)
        else:
            self._cancel_main()

    async def _drain_then_cancel(self) -> None:
        with trio.move_on_after(self.shutdown_timeout):
            while self.conns:
                await trio.sleep(0.01)
        self._cancel_main()

    async def _accept_all(self, listeners: list[tuple[trio.SocketListener, str]]) -> None:
        try:
            with self._accept_scope:
                async with trio.open_nursery() as nursery:
                    for listener, protocol in listeners:
                        nursery.start_soon(self._accept_loop, listener, protocol)
        finally:  # also when cancelled before the loops started
            for listener, _ in listeners:
                listener.socket.close()

    def _cancel_main(self) -> None:
        if self._main_scope is not None:
            self._main_scope.cancel()

    async def _main(self, ready: ReadyCallback | None) -> None:
        self._token = trio.lowlevel.current_trio_token()
        bound = bind_listeners(self.listeners, self.recv_buffer)  # outside the nursery: its error stays an OSError
        try:
            with trio.CancelScope() as self._main_scope:
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    nursery.start_soon(self._accept_all, [
                        (trio.SocketListener(trio.socket.from_stdlib_socket(sock)), lst.protocol)
                        for sock, lst in bound])
                    nursery.start_soon(self._timer_task)
                    nursery.start_soon(self._sync_task)
                    self.pump()
                    self._announce([lst for _, lst in bound], ready)
                    if self._stop_flag.is_set():
                        self._begin_stop()
        finally:
            self._stop_all(list(self.conns))
            self.conns.clear()
