"""The threaded front end: ``conn = sansmq_client.sync.connect("amqp://guest:guest@host/")``.

Thread-safety: every method of ``Connection``, ``Subscription`` and ``Transaction`` may be called from
any thread, concurrently. The client's state is guarded by one lock: a call runs its operation in the
caller's thread under it and writes the frames to the socket itself (no hop to another thread on the way
out), then blocks until the I/O thread, which reads the socket and keeps the timers, has the answer (a
publish: the broker's confirm). Subscription callbacks run on a thread of their subscription, never on
the I/O thread, so a callback that blocks for minutes does not stop heart-beats."""

from __future__ import annotations

import dataclasses
import logging
import queue
import select
import selectors
import socket
import ssl
import threading
import time
from _thread import allocate_lock
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from . import _api
from ._core import Core
from ._errors import ClientError, ConnectionLost
from ._model import ConsumerRecord, Delivery, QueueStatus
from ._pending import Pending
from ._session import TxRecord
from ._url import Params, parse_url

__all__ = ["connect", "Connection", "Subscription", "Transaction"]

log = logging.getLogger("sansmq_client")

_RECV = 1 << 18  # one read: a stream reader's deliveries arrive faster than 64 KiB at a time

#: how long input stays with the callers after the last call that read it (see ``_caller_reads``): what
#: arrives meanwhile for no caller (a delivery, a heart-beat) waits at most this long
LEND = 0.005



def connect(url: str, **options: Any) -> Connection:
    """Connect to the first reachable host of ``url`` (``amqp://`` or ``stomp://``, hosts comma-separated).
    Raises if none answers or the broker refuses the log-in. ``options`` override the URL's (fields of
    ``Params``, e.g. ``connect_timeout=30``)."""
    conn = Connection(Core(dataclasses.replace(parse_url(url), **options), time.monotonic))
    conn._thread.start()
    try:
        conn._call(lambda core: core.connected)
    except BaseException:
        conn._release()  # the I/O thread has finished: no thread or socket left behind
        raise
    return conn


class Connection:
    """A client connection (AMQP or STOMP) for threaded code; see the module's note on thread-safety."""

    def __init__(self, core: Core) -> None:
        self._core = core
        #: guards the core, ``_sock`` and ``_out``: held by a caller for its operation and its write, and by
        #: the I/O thread around everything but its wait in select() and its recv()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # the current connection's socket, while there is one
        self._out = bytearray()  # bytes for it that did not fit in the socket's buffer yet
        #: who reads the socket (recv and feed, as one step, so chunks are fed in order): a caller waiting for
        #: its answer, or the I/O thread
        self._reader = threading.Lock()
        self._sel: selectors.BaseSelector | None = None  # the I/O thread's selector, while it has a socket
        self._events = 0  # what the socket is registered for in it (0: not registered)
        self._flush_due = False  # settles are queued and the I/O thread was woken to write them
        #: input is left to callers: the I/O thread does not watch for it. Set by a caller that reads its answer
        #: and kept after it returns while calls keep coming (the I/O thread takes input back LEND after the
        #: last one): an epoll_ctl pair per call saved
        self._caller_reads = False
        self._lent_at = 0.0  # when the last reading caller let go of the socket
        self._waiters = 0  # callers waiting for an answer someone else reads
        self._poll: select.poll | None = None  # the reading caller's wait for input on the socket
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="sansmq_client I/O", daemon=True)

    # -- a call: the operation and its write in the caller's thread, the answer from the I/O thread ------
    def _call(self, make: Callable[[Core], Pending[Any]]) -> Any:
        """Run ``make`` under the lock and block until the Pending it returns is done."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("sansmq_client.sync calls must not run on the I/O thread")
        done = allocate_lock()  # released by the I/O side when the answer is in: cheaper than an Event
        done.acquire()
        box: list[Pending[Any]] = []

        def finished(p: Pending[Any]) -> None:
            box.append(p)
            done.release()
        # One thread hop less: if no one else reads, this caller reads its answer from the socket itself,
        # and the I/O thread stops watching the socket (before the request goes out, so it never wakes for
        # the answer) and keeps only the timers.
        reading = self._reader.acquire(blocking=False)
        try:
            with self._lock:
                if reading:
                    if not self._caller_reads:  # a streak begins: the I/O thread must look again within LEND
                        self._caller_reads = True
                        self._register()
                        self._wake()
                else:
                    self._waiters += 1
                make(self._core).add_done_callback(finished)
                self._after()
            if reading and not box:
                self._read_until(box)
        finally:
            if reading:
                with self._lock:
                    self._lent_at = time.monotonic()
                    if self._waiters:  # others wait for answers: the I/O thread reads them now
                        self._caller_reads = False
                        self._register()
                self._reader.release()
        done.acquire()
        if not reading:
            with self._lock:
                self._waiters -= 1
        return box[0].result()

    def _read_until(self, box: list[Pending[Any]]) -> None:
        """Feed the core from the socket until ``box`` has the answer; return early, leaving the rest to
        the I/O thread, when a timer is due or the connection ends. The caller holds the reader role."""
        core = self._core
        with self._lock:
            sock, poll = self._sock, self._poll
        if sock is None or poll is None:
            return
        while not box:
            with self._lock:
                if self._sock is not sock or core.session is None or core.session.error is not None:
                    return
                timer, now = core.get_timer(), core.clock()
            if timer is not None and timer <= now:
                return  # heart-beats and the peer's timeout: the I/O thread's job
            # at most a second: a connection closed from elsewhere is noticed even without input
            if not poll.poll(1000 if timer is None else min(1000, (timer - now) * 1000 + 1)):
                continue
            with self._lock:
                try:
                    data = recv_ready(sock)
                except AGAIN:
                    continue
                except OSError:
                    return  # the I/O thread sees the dead socket too, and reconnects
                core.receive_data(data)
                self._after()

    def _locked(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the core in this thread, then ``_after``."""
        with self._lock:
            fn()
            self._after()

    def _after(self) -> None:
        """After the core ran in a caller's thread (lock held): send its output, and wake the I/O thread
        only if it must act: bytes the socket could not take now, or a connection that ended or is not
        there (e.g. closed while the thread waits to reconnect)."""
        core = self._core
        if self._flush() or core.final_error is not None or core.session is None or core.session.error is not None:
            self._wake()

    def _flush(self) -> bool:
        """Write the core's output to the socket without blocking (lock held); True if bytes are left."""
        out = self._out
        out += self._core.data_to_send()
        sock = self._sock
        if out and sock is not None:
            try:
                del out[:sock.send(out)]
            except AGAIN:
                pass
            except OSError:
                return False  # the socket died: the I/O thread's recv() sees it and reconnects
        return bool(out) and sock is not None

    def _register(self, left: bool = False) -> None:
        """Make the I/O thread's interest in the socket what it should be (lock held): input unless a caller
        reads, output while bytes are left over. Changed only when it changes (an epoll_ctl each)."""
        sel, sock = self._sel, self._sock
        want = (0 if self._caller_reads else selectors.EVENT_READ) | (selectors.EVENT_WRITE if left or self._out else 0)
        if sel is None or sock is None or want == self._events:
            return
        if not self._events:
            sel.register(sock, want)
        elif not want:
            sel.unregister(sock)
        else:
            sel.modify(sock, want)
        self._events = want

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:
            pass  # already woken (a full pipe), or the thread is gone

    # -- the API -------------------------------------------------------------------------------
    @property
    def server_properties(self) -> dict[str, Any]:
        """What the broker said of itself in its last connection.start (AMQP; ``{}`` for STOMP)."""
        session = self._core.session
        return dict(getattr(session, "server_properties", None) or {})

    @property
    def capabilities(self) -> dict[str, Any]:
        """The ``capabilities`` table of ``server_properties`` (e.g. ``publisher_confirms``)."""
        caps = self.server_properties.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    def publish(self, target: str, body: bytes, *, headers: dict[str, Any] | None = None,
                confirm: bool = True, exchange: str | None = None, properties: Any = None) -> None:
        """Publish ``body`` to ``target`` (STOMP destination, or AMQP routing key on ``exchange``). With
        ``confirm`` this returns once the broker took responsibility and raises if it did not."""
        self._call(lambda core: core.publish(target, body, headers or {},
                                             _api.publish_options(exchange, properties), confirm))

    def declare_queue(self, name: str = "", *, durable: bool = False, exclusive: bool = False,
                      auto_delete: bool = False, passive: bool = False,
                      arguments: dict[str, Any] | None = None) -> str:
        args = _api.queue_args(name, durable, exclusive, auto_delete, passive, arguments)
        return str(self._call(lambda core: core.declare("queue", args)).queue)

    def queue_status(self, name: str, arguments: dict[str, Any] | None = None) -> QueueStatus:
        """A passive queue.declare (AMQP): how many messages and consumers queue ``name`` has. A queue that
        does not exist raises ``ChannelClosed`` with reply code 404; the connection stays usable.
        ``arguments`` go with the declare (sansmq reads some on a stream, e.g. a byte-bounded range's)."""
        args = _api.queue_args(name, False, False, False, True, arguments)
        ok = self._call(lambda core: core.declare("queue", args))
        return QueueStatus(str(ok.queue), int(ok.message_count), int(ok.consumer_count))

    def declare_exchange(self, name: str, type: str = "direct", *, durable: bool = False,
                         auto_delete: bool = False, passive: bool = False,
                         arguments: dict[str, Any] | None = None) -> None:
        args = _api.exchange_args(name, type, durable, auto_delete, passive, arguments)
        self._call(lambda core: core.declare("exchange", args))

    def bind_queue(self, queue: str, exchange: str, routing_key: str = "",
                   arguments: dict[str, Any] | None = None) -> None:
        args = _api.bind_args(queue, exchange, routing_key, arguments)
        self._call(lambda core: core.declare("bind", args))

    def unbind_queue(self, queue: str, exchange: str, routing_key: str = "",
                     arguments: dict[str, Any] | None = None) -> None:
        """queue.unbind (AMQP); the binding is no longer restored after a reconnect."""
        args = _api.bind_args(queue, exchange, routing_key, arguments)
        self._call(lambda core: core.declare("unbind", args))

    def delete_queue(self, name: str) -> None:
        self._call(lambda core: core.declare("delete_queue", {"queue": name}))

    def subscribe(self, source: str, callback: Callable[[Delivery], Any] | None = None, *, prefetch: int = 0,
                  auto_ack: bool = False, offset: int | str | None = None,
                  arguments: dict[str, Any] | None = None) -> Subscription:
        """Consume from ``source``. With ``callback``, a thread of this subscription calls it per delivery
        (in order); without, iterate the returned subscription."""
        inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        made: list[ConsumerRecord] = []

        def start(core: Core) -> Pending[None]:
            consumer, pending = core.subscribe(source, prefetch, auto_ack, offset, arguments or {}, inbox.put,
                                               lambda error: inbox.put((None, error)))
            made.append(consumer)
            return pending
        self._call(start)
        return Subscription(self, made[0], inbox, callback)

    def ack(self, delivery: Delivery) -> None:
        self._settle(delivery, "ack", False)

    def nack(self, delivery: Delivery, requeue: bool = True) -> None:
        self._settle(delivery, "nack", requeue)

    def reject(self, delivery: Delivery, requeue: bool = False) -> None:
        self._settle(delivery, "reject", requeue)

    def _settle(self, delivery: Delivery, how: str, requeue: bool, tx: TxRecord | None = None) -> None:
        """One-way (nothing to wait for): queued, and written by the I/O thread, which one wake-up sends
        for all the settles queued until it runs (one write for a batch of acks, not one each)."""
        self._core.check_settle(delivery, tx)
        with self._lock:
            self._core.settle(delivery, how, requeue, tx)
            if not self._flush_due:
                self._flush_due = True
                self._wake()

    def transaction(self) -> Transaction:
        """``with conn.transaction() as tx:`` begins, commits at the end, rolls back on an exception."""
        return Transaction(self)

    def close(self) -> None:
        """Close cleanly (connection.close / DISCONNECT with a receipt) and join the I/O thread."""
        if self._thread.is_alive():
            self._call(lambda core: core.close())
        self._release()

    def _release(self) -> None:
        self._thread.join()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the I/O thread --------------------------------------------------------------------------
    def _run(self) -> None:
        core = self._core
        try:
            while core.final_error is None:
                self._connect_once()
                with self._lock:
                    delay = core.backoff() if core.final_error is None else 0.0
                if delay:
                    self._idle(delay)
        except Exception as exc:  # a bug here must end the connection loudly, not hang its callers
            log.exception("sansmq_client I/O thread failed")
            with self._lock:
                core.finish(ConnectionLost(f"the client's I/O thread failed: {exc!r}"))

    def _idle(self, seconds: float) -> None:
        """Back-off between attempts, woken early by close() (it must not wait for the next attempt)."""
        deadline = time.monotonic() + seconds
        while self._core.final_error is None and (left := deadline - time.monotonic()) > 0:
            with selectors.DefaultSelector() as sel:
                sel.register(self._wake_r, selectors.EVENT_READ)
                if sel.select(left):
                    self._drain_wake()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass

    def _take_input_back(self) -> None:
        """Watch for input again once callers have stopped reading it for LEND (none reads right now)."""
        if not self._reader.acquire(blocking=False):
            return  # a caller reads: it is not over
        try:
            with self._lock:
                if self._caller_reads and time.monotonic() - self._lent_at >= LEND:
                    self._caller_reads = False  # the loop's next _register() watches for input again
        finally:
            self._reader.release()

    def _connect_once(self) -> None:
        core = self._core
        with self._lock:
            host, port = core.next_host()
        try:
            sock = _open_socket(host, port, core.params)
        except OSError as exc:
            with self._lock:
                core.connect_failed(exc)
            return
        sock.setblocking(False)
        # a request waits for its answer: never hold a small frame back for coalescing (Nagle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _api.tune_socket(sock, core.params)
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        poll = select.poll()
        poll.register(sock, select.POLLIN)
        with self._lock:
            core.attach()
            self._sock, self._out, self._sel, self._poll, self._events = sock, bytearray(), sel, poll, 0
        try:
            while True:
                with self._lock:
                    if core.session is None or core.session.error is not None:
                        break
                    self._flush_due = False
                    self._register(self._flush())
                    timer, now = core.get_timer(), core.clock()
                    if timer is not None and timer <= now:
                        core.handle_timer()
                        continue
                    wait = None if timer is None else timer - now
                    if self._caller_reads:  # lent to callers: look again LEND later
                        wait = LEND if wait is None else min(wait, LEND)
                events = sel.select(wait)
                if self._caller_reads:
                    self._take_input_back()
                for key, mask in events:
                    if key.fileobj is self._wake_r:
                        self._drain_wake()
                    elif mask & selectors.EVENT_READ:
                        # a caller that read meanwhile may have taken the bytes; the recv is under the lock
                        # too (it does not block): a TLS socket must not read while another thread writes
                        with self._reader, self._lock:
                            try:
                                data = recv_ready(sock)  # b"" is EOF: the session ends itself
                            except AGAIN:
                                continue
                            core.receive_data(data)
            with self._lock:
                self._out += core.data_to_send()  # e.g. the close-ok owed to the broker's connection.close
                out, self._sock, self._sel, self._poll = bytes(self._out), None, None, None
            if out:
                sock.setblocking(True)
                sock.settimeout(1)
                sock.sendall(out)
        except OSError as exc:
            with self._lock:
                self._sock = self._sel = self._poll = None
                core.detach(ConnectionLost(f"connection to {host}:{port} lost: {exc}"))
        finally:
            with self._lock:
                self._sock = self._sel = self._poll = None
                core.detach()
            with self._reader:  # a caller still reading lets go first (it sees the socket is no longer current)
                sel.close()
                sock.close()


#: a non-blocking socket with nothing to give or take now (TLS: a record not yet whole)
AGAIN = (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError)


def _open_socket(host: str, port: int, params: Params) -> socket.socket:
    """A connected socket (TLS handshake done for amqps:// and stomps://), still blocking."""
    sock = socket.create_connection((host, port), timeout=params.connect_timeout)
    if params.tls is None:
        return sock
    try:
        return params.tls.wrap(sock, host)
    except BaseException:
        sock.close()
        raise


def recv_ready(sock: socket.socket) -> bytes:
    """What a readable non-blocking socket holds, with what TLS already decrypted (``pending``: bytes the
    poll cannot see)."""
    data = sock.recv(_RECV)
    if data and isinstance(sock, ssl.SSLSocket):
        while sock.pending():
            data += sock.recv(_RECV)
    return data


class Subscription:
    """One consumer's deliveries: iterate it (blocking), or give ``subscribe`` a callback. Iteration ends
    when it is cancelled or the connection closed; it raises the broker's error if the broker ended it."""

    def __init__(self, conn: Connection, consumer: ConsumerRecord, inbox: queue.SimpleQueue[Any],
                 callback: Callable[[Delivery], Any] | None) -> None:
        self._conn, self.consumer, self._inbox = conn, consumer, inbox
        self.error: BaseException | None = None  # why a callback subscription ended, if the broker ended it
        self._thread: threading.Thread | None = None
        if callback is not None:
            self._thread = threading.Thread(target=self._dispatch, args=(callback,), daemon=True,
                                            name=f"sansmq_client {consumer.tag}")
            self._thread.start()

    def __iter__(self) -> Iterator[Delivery]:
        return self

    def __next__(self) -> Delivery:
        # (take() reads two fields the I/O thread writes: a benign race, the broker redelivers anyway)
        while (delivery := self._conn._core.take(self._inbox.get(), self._inbox.put, StopIteration)) is None:
            pass
        return delivery

    def get(self, timeout: float | None = None) -> Delivery | None:
        """The next delivery, or None if none arrives within ``timeout`` seconds (None: wait as long as it
        takes) or the subscription ended cleanly; raises the broker's error if the broker ended it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                item = self._inbox.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return None
            try:
                delivery = self._conn._core.take(item, self._inbox.put, StopIteration)
            except StopIteration:
                return None
            if delivery is not None:
                return delivery

    def _dispatch(self, callback: Callable[[Delivery], Any]) -> None:
        try:
            for delivery in self:
                try:
                    callback(delivery)
                except Exception:  # the user's bug: say so, keep consuming
                    log.exception("sansmq_client: callback of %s failed", self.consumer.tag)
        except Exception as exc:
            self.error = exc
            log.error("sansmq_client: subscription %s ended: %s", self.consumer.tag, exc)

    def pending(self) -> int:
        """Deliveries received and not yet taken by the iteration or the callback."""
        return self._inbox.qsize()

    def cancel(self) -> None:
        self._conn._call(lambda core: core.cancel(self.consumer))
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


class Transaction:
    """Publishes (and, over STOMP, acks) that take effect together at ``commit()``."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._tx: TxRecord | None = None

    def begin(self) -> None:
        made: list[TxRecord] = []

        def start(core: Core) -> Pending[None]:
            tx, pending = core.tx_begin()
            made.append(tx)
            return pending
        self._conn._call(start)
        self._tx = made[0]

    @property
    def tx(self) -> TxRecord:
        if self._tx is None:
            raise RuntimeError("the transaction has not begun (use `with conn.transaction() as tx`)")
        return self._tx

    def publish(self, target: str, body: bytes, *, headers: dict[str, Any] | None = None,
                exchange: str | None = None, properties: Any = None) -> None:
        tx = self.tx
        self._conn._call(lambda core: core.publish(target, body, headers or {},
                                                   _api.publish_options(exchange, properties), False, tx))

    def ack(self, delivery: Delivery) -> None:
        """STOMP: ACK inside the transaction. (AMQP acks belong to the consumer's channel, not this one.)"""
        self._conn._settle(delivery, "ack", False, self.tx)

    def commit(self) -> None:
        tx = self.tx
        self._conn._call(lambda core: core.tx_end(tx, True))

    def rollback(self) -> None:
        tx = self.tx
        self._conn._call(lambda core: core.tx_end(tx, False))

    def __enter__(self) -> Transaction:
        self.begin()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is None:
            self.commit()
            return
        try:
            self.rollback()
        except ClientError as failed:  # the block's own exception stays the one raised
            exc.add_note(f"and the rollback failed: {failed}")
