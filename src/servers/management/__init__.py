"""Operations listeners: the management HTTP API with the admin page, and Prometheus metrics.

Both run in their own threads (waitress, a maintained pure-Python WSGI server, so it fits every
adapter alike) and reach the broker only through ``Driver.call_soon``: snapshots to read,
commands to change it, each run on the broker's own thread.
"""

from __future__ import annotations

import functools
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import waitress
from waitress import wasyncore

from .._driver import format_address, log
from .._sockets import ListenError
from .api import ManagementApi
from .channel import DeadlineChannel
from .https import tls_channel
from .prometheus import prometheus_app
from .request import COMMAND_TIMEOUT, MAX_BODY

__all__ = ["OpsListeners", "DEFAULT_HTTP", "DEFAULT_PROMETHEUS", "HTTPS_PORT", "PROMETHEUS_HTTPS_PORT", "OPS_EPHEMERAL"]

DEFAULT_HTTP = ("127.0.0.1", 15672)
DEFAULT_PROMETHEUS = ("127.0.0.1", 15692)
#: the TLS listeners' default ports (RabbitMQ's management.ssl.port and prometheus.ssl.port)
HTTPS_PORT = 15671
PROMETHEUS_HTTPS_PORT = 15691
#: ``sansmq serve`` arguments putting both listeners on ephemeral ports (tests run many servers)
OPS_EPHEMERAL = ("--http", "127.0.0.1:0", "--prometheus", "127.0.0.1:0")
#: seconds an idle HTTP connection is kept (waitress's channel_timeout; a slow request head has
#: channel.HEADER_TIMEOUT)
HTTP_TIMEOUT = 30
#: open connections per HTTP listener before it stops accepting (waitress's default is 100, which a
#: few hundred idle sockets exhaust)
CONNECTION_LIMIT = 4096
_WS_NAMES = {"amqp": "amqp", "stomp": "stomp", "ws": "http/web-stomp"}


class OpsListeners:
    """The HTTP listeners of one running server; ``start`` once the driver serves, ``stop`` after."""

    def __init__(self, driver: Any, http: tuple[str, int] | None, prometheus: tuple[str, int] | None,
                 https: tuple[str, int] | None = None, prometheus_https: tuple[str, int] | None = None,
                 tls: ssl.SSLContext | None = None, cluster: Any = None) -> None:
        """``https`` and ``prometheus_https``: the same apps over TLS with ``tls`` (needed then).
        ``cluster``: the node's ``servers.cluster.node.ClusterNode`` (its name and peers)."""
        if (https or prometheus_https) and tls is None:
            raise ValueError("an HTTPS listener needs a TLS context (a certificate)")
        self.driver = driver
        if cluster is None:
            self.api = ManagementApi(self._call, self._listeners)
        else:
            self.api = ManagementApi(self._call, self._listeners, cluster.rabbit_name, cluster.nodes,
                                     cluster.cluster_name)
        self._want = {"http": http, "prometheus": prometheus, "https": https,
                      "prometheus_https": prometheus_https}
        self._tls = tls
        self._servers: dict[str, Any] = {}
        self._threads: list[threading.Thread] = []
        self.bound: dict[str, tuple[str, int]] = {}
        #: listeners whose loop died (name -> why): the health checks fail for them
        self.failed: dict[str, str] = {}
        self._stopping = False
        self.api.failed = self.failed
        metrics = prometheus_app(self.api.snap, self.api.call, self.api.node, self.api.cluster_name)
        self._apps = {"http": self.api, "prometheus": metrics, "https": self.api, "prometheus_https": metrics}

    def _call(self, fn: Callable[[Any], Any]) -> Any:
        """``fn(broker)`` on the broker's thread (at the current time), its result here."""
        broker = self.driver.broker
        try:
            future = self.driver.call_soon(lambda: broker.run_command(fn, time.time()))
        except RuntimeError:  # the server stopped
            raise TimeoutError("the broker is not running") from None
        return future.result(COMMAND_TIMEOUT)

    def _listeners(self) -> list[tuple[str, str, int]]:
        out = [(_WS_NAMES.get(lst.protocol, lst.protocol), lst.host, lst.port) for lst in self.driver.bound]
        out += [(name, host, port) for name, (host, port) in self.bound.items() if name not in self.failed]
        return out

    def bind(self) -> None:
        """Bind every listener, serving nothing yet (a ListenError names the one whose address is
        taken); the server binds these before its own so that no "listening" line precedes a failure."""
        for name, where in self._want.items():
            if where is None or name in self._servers:
                continue
            try:
                server = waitress.create_server(
                    self._apps[name], host=where[0], port=where[1], threads=4, ident="sansmq",
                    max_request_body_size=2 * MAX_BODY, channel_timeout=HTTP_TIMEOUT, expose_tracebacks=False,
                    url_scheme="https" if "https" in name else "http",
                    # poll(), not select(): select() fails for descriptors above 1,023
                    asyncore_use_poll=True, connection_limit=CONNECTION_LIMIT,
                    # X-Forwarded-Host/-Proto reach the app (only the Origin check reads them: guard.py)
                    clear_untrusted_proxy_headers=False)
            except OSError as exc:  # as for the protocol listeners: which one, where, why
                raise ListenError.of(name, where[0], where[1], exc) from None
            if "https" in name:
                assert self._tls is not None
                server.channel_class = tls_channel(self._tls, name)
            else:
                server.channel_class = type("Channel", (DeadlineChannel,), {"name": name})
            self._servers[name] = server
            self.bound[name] = (where[0], int(server.effective_port))  # waitress gives it as a string

    def start(self) -> None:
        """Bind (unless done) and serve. May run on the broker's thread (the driver's ready callback),
        so it does not wait for the broker."""
        self.bind()
        self.driver.call_soon(self.driver.broker.enable_stats)
        if self.api.cluster_nodes is not None and "http" in self.bound:
            # a cluster node's clients find its API (where queues' leaders are listed) from AMQP
            self.driver.broker.advertised["management_port"] = self.bound["http"][1]
        for name, server in self._servers.items():
            address = format_address(*self.bound[name])
            log.info("%s listening on %s (waitress server)", name, address,
                     extra={"event": "listener.started", "protocol": name, "address": address,
                            "server": "waitress"})
            thread = threading.Thread(target=self._serve, args=(name, server), name=f"sansmq-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, name: str, server: Any) -> None:
        """One listener's loop; its end outside ``stop`` is a failure the health checks report."""
        try:
            server.run()
            if self._stopping:
                return
            why = "its loop ended"
        except Exception as exc:  # noqa: BLE001 - logged and reported, never silent
            why = f"{type(exc).__name__}: {exc}"
            log.error("%s listener failed: %s", name, why, exc_info=True,
                      extra={"event": "listener.failed", "protocol": name})
        else:
            log.error("%s listener stopped unexpectedly: %s", name, why,
                      extra={"event": "listener.failed", "protocol": name})
        self.failed[name] = why

    def stop(self) -> None:
        self._stopping = True
        for server in self._servers.values():
            # closed from the server's own loop thread: closing its sockets from here raced the
            # select() it was in (EBADF in that thread); the loop ends once nothing is left open
            server.trigger.pull_trigger(functools.partial(wasyncore.close_all, server._map, True))
        for thread in self._threads:
            thread.join(5)
        for server in self._servers.values():
            wasyncore.close_all(server._map, True)  # a loop that never ran (or did not stop in time)
            server.task_dispatcher.shutdown()
        self._servers.clear()
        self._threads.clear()
