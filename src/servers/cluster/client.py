"""A small blocking AMQP 0-9-1 client on amqpproto's client role: the cluster's node-to-node link.

Why not ``sansmq_client.sync`` (see docs/operator/cluster.md): every call here must fail within the
cluster lease and never reconnect (a failed link is the signal to re-route), it speaks TLS with the
node's own ``ssl.SSLContext``, and it needs basic.get and raw pipelined publishes with confirms.

One connection, one channel (1), a plain socket. Deliveries that arrive while the client waits for
a method reply are kept in order and handed out by ``next_delivery``; publisher confirms are
counted as they arrive. Anything the broker refuses surfaces as a ``BrokerError`` subclass with the
broker's reply code and text, so a Spark task fails with a message a user can act on.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import amqpproto
from amqpproto import spec
from sansmq_client import Tls, parse_url

__all__ = ["Client", "Delivery", "BrokerError", "BrokerUnreachable", "ChannelError", "ConnectionLost",
           "ConsumerCancelled"]

CH = 1
_NEED_DATA = amqpproto.NEED_DATA
_RECV = 1 << 18


class BrokerError(Exception):
    """The broker refused something or the connection to it failed."""


class BrokerUnreachable(BrokerError):
    """No AMQP connection could be made (refused, timed out, bad credentials)."""


class ConnectionLost(BrokerError):
    """The connection to the broker broke (reset, closed under us): worth trying again."""


class ChannelError(BrokerError):
    """The broker closed the channel or the connection with a reply code."""

    def __init__(self, reply_code: int, reply_text: str, what: str = "") -> None:
        super().__init__(f"{what}: {reply_code} {reply_text}" if what else f"{reply_code} {reply_text}")
        self.reply_code = reply_code
        self.reply_text = reply_text


class ConsumerCancelled(BrokerError):
    """The broker cancelled a consumer (basic.cancel): its queue was deleted."""

    def __init__(self, consumer_tag: str) -> None:
        super().__init__(f"the broker cancelled consumer {consumer_tag!r} (stream deleted?)")
        self.consumer_tag = consumer_tag


@dataclass(slots=True)
class Delivery:
    consumer_tag: str
    delivery_tag: int
    redelivered: bool
    exchange: str
    routing_key: str
    properties: spec.BasicProperties
    body: bytes


class Client:
    """A blocking AMQP 0-9-1 connection with channel 1 open. Use as a context manager."""

    def __init__(self, url: str, *, timeout: float = 30.0, frame_max: int = 131072,
                 tls: ssl.SSLContext | None = None) -> None:
        """``tls``: speak TLS with this context whatever the URL says (a cluster node's link)."""
        self.endpoint = ep = parse_url(url)  # sansmq_client's parser: one for the project
        self.timeout = timeout
        self._tls = tls
        self.conn = amqpproto.Connection(amqpproto.CLIENT, frame_max=frame_max, heartbeat=0)
        self.deliveries: deque[Delivery] = deque()
        self.confirmed = 0  # highest publish sequence number settled (acked or nacked) in order
        self.nacked = 0
        self.published = 0
        self.returned: list[str] = []  # mandatory publishes the broker could not route, described
        self._settled: set[int] = set()
        self._out: list[bytes] = []
        failures = []
        for host, port in ep.hosts:  # a cluster's nodes, in order: the first that takes us
            try:
                self.sock = self._connect(host, port, ep.tls)
            except OSError as exc:
                failures.append(f"cannot connect to the broker at {host}:{port}: {exc}")
                continue
            try:
                self._handshake()
                return
            except (OSError, BrokerError) as exc:  # refused log-in, unknown vhost, dropped connection
                self.sock.close()
                failures.append(f"AMQP handshake with {host}:{port} vhost {ep.vhost!r} failed: {exc}")
                self.conn = amqpproto.Connection(amqpproto.CLIENT, frame_max=frame_max, heartbeat=0)
        raise BrokerUnreachable("; ".join(failures))

    def _connect(self, host: str, port: int, tls: Tls | None) -> socket.socket:
        sock = socket.create_connection((host, port), timeout=self.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls is None and self._tls is None:
            return sock
        try:
            if self._tls is not None:
                return self._tls.wrap_socket(sock, server_hostname=host)
            assert tls is not None
            return tls.wrap(sock, host)
        except BaseException:
            sock.close()
            raise

    # -- context manager -----------------------------------------------------------------------------
    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing ------------------------------------------------------------------------------------
    def _send(self, event: Any) -> None:
        self._out.append(self.conn.send(event))

    def flush(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            try:
                self.sock.sendall(data)
            except OSError as exc:
                raise ConnectionLost(f"connection to the broker lost: {exc}") from exc

    def _read(self, deadline: float | None) -> bool:
        """Read once from the socket into the codec; False if ``deadline`` passed first."""
        self.flush()
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
        else:
            self.sock.settimeout(None)
        try:
            data = self.sock.recv(_RECV)
        except TimeoutError:
            return False
        except OSError as exc:
            raise ConnectionLost(f"connection to the broker lost: {exc}") from exc
        if not data:
            raise ConnectionLost("the broker closed the connection")
        self.conn.receive_data(data)
        return True

    def _pump(self, want: type | tuple[type, ...] | None, deadline: float | None) -> Any:
        """Handle events until one of type ``want`` arrives (returned), or until the buffered data
        is used up when ``want`` is None. Raises on channel/connection close."""
        conn = self.conn
        while True:
            try:
                ev: Any = conn.next_event()
            except amqpproto.RemoteProtocolError as exc:
                raise BrokerError(f"protocol error from the broker: {exc}") from exc
            if ev is _NEED_DATA:
                if want is None:
                    return None
                if not self._read(deadline):
                    raise TimeoutError(f"no {want} from the broker in time")
                continue
            t = type(ev)
            if t is spec.BasicDeliver:
                self.deliveries.append(Delivery(ev.consumer_tag, ev.delivery_tag, ev.redelivered, ev.exchange,
                                                ev.routing_key, ev.properties, ev.body))
            elif t is spec.BasicReturn:  # before the publish's ack (RabbitMQ's order)
                self.returned.append(f"{ev.reply_code} {ev.reply_text}: exchange {ev.exchange!r} routing key "
                                     f"{ev.routing_key!r}")
            elif t is spec.BasicAck or t is spec.BasicNack:
                self._on_confirm(ev.delivery_tag, ev.multiple, t is spec.BasicNack)
            elif t is spec.ChannelClose:
                self._send(spec.ChannelCloseOk(channel=CH))
                self.flush()
                raise ChannelError(ev.reply_code, ev.reply_text)
            elif t is spec.ConnectionClose:
                self._send(spec.ConnectionCloseOk())
                self.flush()
                raise ChannelError(ev.reply_code, ev.reply_text, "connection closed by the broker")
            elif t is spec.BasicCancel:
                raise ConsumerCancelled(ev.consumer_tag)
            elif t is amqpproto.ConnectionClosed:
                raise ConnectionLost("the broker closed the connection")
            elif want is not None and isinstance(ev, want):
                return ev

    def _call(self, method: Any, reply: type | tuple[type, ...]) -> Any:
        self._send(method)
        return self._pump(reply, time.monotonic() + self.timeout)

    def _handshake(self) -> None:
        ep = self.endpoint
        deadline = time.monotonic() + self.timeout
        self._send(amqpproto.ProtocolHeader())
        start = self._pump(spec.ConnectionStart, deadline)
        #: what the broker says of itself (a sansmq cluster node: ``node``, ``management_port``)
        self.server_properties: dict[str, Any] = start.server_properties or {}
        caps = start.server_properties.get("capabilities")
        self.capabilities: dict[str, Any] = caps if isinstance(caps, dict) else {}
        self._send(self.conn.start_ok(start, ep.user, ep.password, "sansmq cluster link"))
        tune = self._pump(spec.ConnectionTune, deadline)
        self._send(self.conn.tune_ok(tune))
        self._send(spec.ConnectionOpen(ep.vhost))
        self._pump(spec.ConnectionOpenOk, deadline)
        self._send(spec.ChannelOpen(channel=CH))
        self._pump(spec.ChannelOpenOk, deadline)

    def qos(self, prefetch: int) -> None:
        self._call(spec.BasicQos(prefetch_count=prefetch, channel=CH), spec.BasicQosOk)

    def consume(self, queue: str, arguments: dict[str, Any] | None = None, consumer_tag: str = "") -> str:
        ok = self._call(spec.BasicConsume(queue=queue, consumer_tag=consumer_tag,
                                          arguments=arguments or {}, channel=CH), spec.BasicConsumeOk)
        return str(ok.consumer_tag)

    def next_delivery(self, timeout: float | None = None) -> Delivery | None:
        """The next delivery, waiting up to ``timeout`` seconds (None: the client's timeout)."""
        if not self.deliveries:
            self._pump(None, None)
            deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
            while not self.deliveries:
                if not self._read(deadline):
                    return None
                self._pump(None, None)
        return self.deliveries.popleft()

    def get(self, queue: str, no_ack: bool = False) -> tuple[Delivery | None, int]:
        """basic.get: the message (None when the queue has none ready) and the queue's message count."""
        ev = self._call(spec.BasicGet(queue=queue, no_ack=no_ack, channel=CH), (spec.BasicGetOk, spec.BasicGetEmpty))
        if type(ev) is spec.BasicGetEmpty:
            return None, 0
        return Delivery("", ev.delivery_tag, ev.redelivered, ev.exchange, ev.routing_key, ev.properties,
                        ev.body), ev.message_count

    def ack(self, delivery_tag: int, multiple: bool = True) -> None:
        """Queue an ack (sent with the next flush or read)."""
        self._send(spec.BasicAck(delivery_tag=delivery_tag, multiple=multiple, channel=CH))

    def reject(self, delivery_tag: int, requeue: bool) -> None:
        self._send(spec.BasicReject(delivery_tag=delivery_tag, requeue=requeue, channel=CH))

    # -- publishing ---------------------------------------------------------------------------------
    def confirm_select(self) -> None:
        self._call(spec.ConfirmSelect(channel=CH), spec.ConfirmSelectOk)

    def publish(self, exchange: str, routing_key: str, properties: spec.BasicProperties | bytes,
                body: bytes, mandatory: bool = False) -> int:
        """Queue one publish; returns its confirm sequence number. A ``mandatory`` one that no queue
        takes comes back (basic.return) and fails ``wait_confirms``."""
        self._send(spec.BasicPublish(0, exchange, routing_key, mandatory, False,
                                     properties, body, CH))  # type: ignore[arg-type]
        self.published += 1
        return self.published

    def _on_confirm(self, tag: int, multiple: bool, nack: bool) -> None:
        if nack:
            self.nacked += 1  # any nack fails the write: the task is retried as a whole
        if multiple:
            self._settled = {t for t in self._settled if t > tag}
            self.confirmed = max(self.confirmed, tag)
        else:
            self._settled.add(tag)
        while self.confirmed + 1 in self._settled:
            self.confirmed += 1
            self._settled.discard(self.confirmed)

    def wait_confirms(self, upto: int) -> None:
        """Block until every publish up to sequence ``upto`` is settled; BrokerError on a nack."""
        deadline = time.monotonic() + self.timeout
        self._pump(None, None)
        while self.confirmed < upto:
            if not self._read(deadline):
                raise BrokerError(f"publisher confirms did not arrive within {self.timeout:g}s "
                                  f"({self.confirmed} of {upto} settled)")
            self._pump(None, None)
        if self.nacked:
            raise BrokerError(f"the broker nacked {self.nacked} publishes")
        if self.returned:
            raise BrokerError(f"{len(self.returned)} publishes could not be routed to any queue (the first: "
                              f"{self.returned[0]})")

    # -- closing -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Orderly connection.close; never raises."""
        try:
            if self.conn.state is amqpproto.OPEN:
                self._send(spec.ConnectionClose(200, "closed by the cluster link"))
                self._pump(spec.ConnectionCloseOk, time.monotonic() + min(self.timeout, 5.0))
        except (BrokerError, OSError, TimeoutError, amqpproto.LocalProtocolError):
            pass
        finally:
            self.sock.close()
