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
#: seconds an idle or slow HTTP connection is kept (waitress's channel_timeout)
HTTP_TIMEOUT = 30
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
        out += [(name, host, port) for name, (host, port) in self.bound.items()]
        return out

    def start(self) -> None:
        """Bind and serve (OSError when an address is taken). May run on the broker's thread (the
        driver's ready callback), so it does not wait for the broker."""
        self.driver.call_soon(self.driver.broker.enable_stats)
        metrics = prometheus_app(self.api.snap, self.api.node, self.api.cluster_name)
        apps = {"http": self.api, "prometheus": metrics, "https": self.api, "prometheus_https": metrics}
        for name, where in self._want.items():
            if where is None:
                continue
            try:
                server = waitress.create_server(
                    apps[name], host=where[0], port=where[1], threads=4, ident="sansmq",
                    max_request_body_size=2 * MAX_BODY, channel_timeout=HTTP_TIMEOUT, expose_tracebacks=False,
                    url_scheme="https" if "https" in name else "http")
            except OSError as exc:  # as for the protocol listeners: which one, where, why
                raise ListenError.of(name, where[0], where[1], exc) from None
            if "https" in name:
                assert self._tls is not None
                server.channel_class = tls_channel(self._tls, name)
            self._servers[name] = server
            port = int(server.effective_port)  # waitress gives it as a string
            self.bound[name] = (where[0], port)
            address = format_address(where[0], port)
            log.info("%s listening on %s (waitress server)", name, address,
                     extra={"event": "listener.started", "protocol": name, "address": address,
                            "server": "waitress"})
            thread = threading.Thread(target=server.run, name=f"sansmq-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
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
