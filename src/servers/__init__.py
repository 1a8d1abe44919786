"""Thin I/O drivers for the sansmq broker: asyncio, threads+epoll and trio, plus the CLI.

Each adapter only moves bytes and time between sockets and an ``engine.Broker`` through the
driver contract (see ``servers._driver``); none holds protocol logic. A listener is
``Listener(protocol, host, port)``: the protocol string ("stomp", later "amqp", "ws") is handed
to ``broker.connection_made`` as is.

Programmatic use:

``running(server, listeners, *, config=None, broker=None, timeout=10.0)``
    Context manager: serves in a daemon thread, yields a :class:`Running` once every listener is
    bound (``.address("stomp") -> (host, port)``, ``.bound``, ``.broker``, ``.stop()``), and
    stops gracefully on exit. Port 0 picks a free port. Used by the test suites::

        with servers.running("trio", [("stomp", "127.0.0.1", 0)], config=cfg) as srv:
            host, port = srv.address("stomp")

``run(server, listeners, *, config=None, broker=None, ready=None, handle_signals=True)``
    Blocks in the calling thread until SIGINT/SIGTERM (what ``sansmq serve`` uses);
    ``ready(bound_listeners)`` is called once listening.

``make_server(server, broker, listeners) -> Driver``
    The adapter itself: ``serve_forever(ready=None)`` blocks; ``stop()`` is thread- and
    signal-safe. Shutdown stops accepting, asks the broker for every client's protocol close
    (``Broker.shutdown``: AMQP connection.close 320, STOMP ERROR, WebSocket Close 1001), waits up to
    ``shutdown_timeout`` seconds for the connections to end, then drops the rest and reports each to
    the broker with ``connection_lost``.

``make_broker(config=None, seed=None, store=None)`` / ``make_store(data_dir, sync=True)``
    An ``engine.Broker`` over ``store`` (a ``MemoryStore`` by default); ``make_store`` opens the embedded
    ``SegmentStore`` in ``data_dir`` (a ``MemoryStore`` when ``data_dir`` is empty).
"""

from ._driver import Driver, Listener
from ._run import SERVER_KINDS, Running, make_broker, make_server, make_store, run, running

__all__ = [
    "Driver",
    "Listener",
    "Running",
    "SERVER_KINDS",
    "make_broker",
    "make_store",
    "make_server",
    "run",
    "running",
]
