"""Programmatic entry points: build a broker, pick an adapter, run it (blocking or in a thread)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import signal
import threading
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Iterator, Sequence

from engine import Broker, Config, MemoryStore
from engine.powercut import POWER_CUT_LOG, PowerCutFS
from engine.segment_store import SegmentStore
from engine.store import Store, StoreError

from ._driver import BrokerLike, Driver, Listener, ReadyCallback, log

__all__ = ["SERVER_KINDS", "ServerUnavailable", "check_server_available", "make_server", "make_broker",
           "make_store", "run", "running", "Running"]

SERVER_KINDS = ("asyncio", "threads", "trio")
#: exit status after a second SIGINT cut the graceful shutdown short (128 + SIGINT, as shells)
EXIT_INTERRUPTED = 130

ListenerSpec = Listener | tuple[str, str, int]


def _listeners(specs: Sequence[ListenerSpec]) -> list[Listener]:
    return [s if isinstance(s, Listener) else Listener(*s) for s in specs]


def make_broker(config: Any = None, *, seed: int | None = None, store: Store | None = None) -> Broker:
    """A real ``engine.Broker`` (``config``: an engine ``Config``) over ``store``, by default an
    in-memory one; pass ``make_store(data_dir)`` for the durable embedded store."""
    return Broker(config if config is not None else Config(), store if store is not None else MemoryStore(),
                  random.Random(seed))


PG_SCHEMES = ("postgresql://", "postgres://")


def is_postgres_url(text: str | None) -> bool:
    return bool(text) and text.startswith(PG_SCHEMES)  # type: ignore[union-attr]


def make_store(data: str | None, *, sync: bool = True) -> Store:
    """The store for ``data``: a ``PostgresStore`` for a ``postgresql://user@host:port/db`` URL, the
    embedded ``SegmentStore`` for a directory (created if missing), or a ``MemoryStore`` when
    ``data`` is None or empty. ``sync=False`` trades durability for speed. Logs which one is used."""
    if not data:
        log.info("store: memory (nothing survives a restart)")
        return MemoryStore()
    if not sync:
        log.warning("--sync off: receipts and confirms no longer wait for fsync; "
                    "a crash or power loss can lose persistent messages that were confirmed")
    if is_postgres_url(data):
        try:
            from engine.postgres_store import PostgresStore  # psycopg: the optional 'postgresql' extra
        except ImportError as exc:
            raise StoreError("the PostgreSQL store needs psycopg 3 "
                             f"(pip install 'sansmq[postgresql]'): {exc}") from None

        pg = PostgresStore(data, sync=sync)
        log.info("store: PostgreSQL %s (synchronous_commit %s)", pg.display_dsn, "on" if sync else "off")
        return pg
    cut_log = os.environ.get(POWER_CUT_LOG)
    if cut_log:  # only scripts/crash_test.py sets it: a real disk whose unsynced writes it can undo
        log.warning("store: recording unsynced writes in %s for a simulated power cut", cut_log)
        store = SegmentStore(data, sync=sync, fs=PowerCutFS(cut_log))
    else:
        store = SegmentStore(data, sync=sync)
    log.info("store: segment files in %s (fsync %s)", data, "on" if sync else "off")
    return store


class ServerUnavailable(RuntimeError):
    """The chosen server needs a package that is not installed (the message says how to get it)."""


#: server kind -> (the module it needs, the extra that installs it)
OPTIONAL_SERVER_DEPS = {"trio": ("trio", "trio")}


def check_server_available(server: str) -> None:
    """Raise :class:`ServerUnavailable` with an install hint when ``server``'s dependency is missing."""
    need = OPTIONAL_SERVER_DEPS.get(server)
    if need is not None and importlib.util.find_spec(need[0]) is None:
        raise ServerUnavailable(f"the {server} server needs the '{need[0]}' package, which is not installed: "
                                f"pip install 'sansmq[{need[1]}]'")


def make_server(
    server: str, broker: BrokerLike, listeners: Sequence[ListenerSpec]
) -> Driver:
    """An adapter instance, not yet serving; call ``serve_forever()`` then ``stop()``."""
    # imported on demand: trio is an optional dependency
    if server == "asyncio":
        from ._asyncio import AsyncioServer as cls
    elif server == "threads":
        from ._threads import ThreadsServer as cls  # type: ignore[assignment]
    elif server == "trio":
        check_server_available(server)
        from ._trio import TrioServer as cls  # type: ignore[assignment]
    else:
        raise ValueError(f"unknown server kind {server!r}; expected one of {SERVER_KINDS}")
    bound = _listeners(listeners)
    limits = getattr(getattr(broker, "config", None), "limits", None)  # None: a test double
    contexts = {lst.protocol: lst.tls for lst in bound if lst.tls is not None}
    if contexts:  # TLS listeners: the broker is seen through the TLS layer (one for every server kind)
        from .tls import TlsBroker

        broker = TlsBroker(broker, contexts)
    driver = cls(broker, bound)
    if limits is not None:
        driver.recv_buffer = limits.tcp_recv_buffer
    return driver


def run(
    server: str = "asyncio",
    listeners: Sequence[ListenerSpec] = (("stomp", "127.0.0.1", 61613),),
    *,
    config: Any = None,
    broker: BrokerLike | None = None,
    ready: ReadyCallback | None = None,
    handle_signals: bool = True,
    driver: Driver | None = None,
) -> None:
    """Serve in the calling thread until SIGINT/SIGTERM (main thread only), then shut down
    gracefully and return. A broker built here (from ``config``) has its store closed on return.
    For in-process tests prefer :func:`running`, which can be stopped from the test. ``driver``:
    an adapter already made by :func:`make_server` (to set its timeouts first)."""
    own: Broker | None = None
    if broker is None:
        broker = own = make_broker(config)
    srv = driver if driver is not None else make_server(server, broker, listeners)
    if handle_signals and threading.current_thread() is threading.main_thread():
        signalled: list[int] = []

        def on_signal(signum: int, frame: object) -> None:
            name = signal.Signals(signum).name
            if signalled and signum == signal.SIGINT:
                # the operator insists: no more waiting (unsynced, unconfirmed work is not lost
                # to clients that were told it was safe: confirms only follow an fsync)
                os.write(2, f"sansmq: second {name}: exiting at once\n".encode())
                os._exit(EXIT_INTERRUPTED)
            signalled.append(signum)
            log.info("%s: shutting down gracefully (a second SIGINT exits at once)", name,
                     extra={"event": "server.signal", "signal": name})
            srv.stop()

        # Installed before the loop starts, so asyncio.run / trio.run leave SIGINT to us.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, on_signal)
    try:
        srv.serve_forever(ready)
    finally:
        if own is not None:
            own.close_store()
    log.info("stopped")


@dataclass(slots=True)
class Running:
    """A server running in a background thread (see :func:`running`)."""

    server: Driver
    broker: BrokerLike
    thread: threading.Thread
    bound: list[Listener] = field(default_factory=list)

    def address(self, protocol: str = "stomp") -> tuple[str, int]:
        """(host, port) actually bound for the first listener of ``protocol``."""
        for lst in self.bound:
            if lst.protocol == protocol:
                return lst.host, lst.port
        raise KeyError(protocol)

    def admin(self, fn: Callable[[Any], Any], timeout: float = 10.0) -> Any:
        """Run ``fn(broker)`` on the server's loop thread (see ``Driver.call_soon``), return its result."""
        broker = self.server.broker
        return self.server.call_soon(lambda: fn(broker)).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        self.server.stop()
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError("server thread did not stop")


@contextlib.contextmanager
def running(
    server: str = "asyncio",
    listeners: Sequence[ListenerSpec] = (("stomp", "127.0.0.1", 0),),
    *,
    config: Any = None,
    broker: BrokerLike | None = None,
    timeout: float = 10.0,
) -> Iterator[Running]:
    """Run a server in a daemon thread; yields once every listener is bound; stops on exit.

    All broker calls happen in that thread: touch ``Running.broker`` only after ``stop()``.
    """
    if broker is None:
        broker = make_broker(config)
    srv = make_server(server, broker, listeners)
    bound_event = threading.Event()
    errors: list[BaseException] = []
    handle = Running(srv, broker, threading.Thread())

    def on_ready(bound: list[Listener]) -> None:
        handle.bound = bound
        bound_event.set()

    def target() -> None:
        try:
            srv.serve_forever(on_ready)
        except BaseException as exc:  # surfaced to the caller below
            errors.append(exc)
        finally:
            bound_event.set()

    handle.thread = threading.Thread(target=target, name=f"sansmq-{server}", daemon=True)
    handle.thread.start()
    if not bound_event.wait(timeout):
        srv.stop()
        raise TimeoutError(f"{server} server did not start within {timeout}s")
    if errors:
        raise errors[0]
    try:
        yield handle
    finally:
        if handle.thread.is_alive():
            handle.stop(timeout)
        if errors:
            raise errors[0]
