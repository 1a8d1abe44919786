"""``sansmq streams create NAME`` and ``sansmq streams create-partitioned NAME --partitions N``: a
stream, or a partitioned stream (RabbitMQ's "super stream"), made over AMQP 0-9-1 on a running broker.

``create`` declares one durable stream queue NAME (with the retention given), as a client's
``queue.declare`` with ``x-queue-type: stream`` would, and binds it to the exchanges given with
``--bind`` (e.g. the firehose ``amq.rabbitmq.trace`` for ``sansmq analyze``); running it again
changes nothing.

It declares a durable direct exchange NAME with argument ``x-partitioned: true`` (sansmq routes
such an exchange by routing-key hash: see ``engine.model.routers.PartitionRouter``), N durable
streams ``NAME-0`` .. ``NAME-<N-1>``, and binds partition i with routing key ``str(i)`` (RabbitMQ's
super stream layout). A producer publishes to the exchange with any routing key; readers read the
partitions in parallel. Running it again with the same arguments changes nothing.
"""

from __future__ import annotations

import argparse
import socket
import sys
from typing import Any

import amqpproto
from amqpproto import spec

__all__ = ["add_streams_arguments", "bind_stream", "create_partitioned", "create_stream", "streams_command"]

CH = 1


class _Blocking:
    """Just enough of a blocking AMQP 0-9-1 client to call methods one at a time."""

    def __init__(self, host: str, port: int, user: str, password: str, vhost: str, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.conn = amqpproto.Connection(amqpproto.CLIENT)
        self._send(amqpproto.ProtocolHeader())
        self._wait(spec.ConnectionStart)
        self._send(spec.ConnectionStartOk({"product": "sansmq streams"}, "PLAIN",
                                          amqpproto.plain_response(user, password), "en_US"))
        self._send(self.conn.tune_ok(self._wait(spec.ConnectionTune)))
        self._send(spec.ConnectionOpen(vhost))
        self._wait(spec.ConnectionOpenOk)
        self.call(spec.ChannelOpen(channel=CH), spec.ChannelOpenOk)

    def _send(self, event: Any) -> None:
        self.sock.sendall(self.conn.send(event))

    def _wait(self, cls: type) -> Any:
        while True:
            ev = self.conn.next_event()
            if ev is amqpproto.NEED_DATA:
                data = self.sock.recv(65536)
                self.conn.receive_data(data)
                if not data:
                    raise ConnectionError("the broker closed the connection")
                continue
            if isinstance(ev, (spec.ConnectionClose, spec.ChannelClose)):
                raise RuntimeError(f"{ev.reply_code} {ev.reply_text}")
            if isinstance(ev, cls):
                return ev

    def call(self, method: Any, reply: type) -> Any:
        self._send(method)
        return self._wait(reply)

    def close(self) -> None:
        try:
            self.call(spec.ConnectionClose(200, "bye", 0, 0), spec.ConnectionCloseOk)
        finally:
            self.sock.close()


def create_stream(client: Any, name: str, queue_args: dict[str, Any] | None = None) -> None:
    """Declare the durable stream queue NAME with the given retention arguments."""
    client.call(spec.QueueDeclare(queue=name, durable=True,
                                  arguments={"x-queue-type": "stream", **(queue_args or {})}, channel=CH),
                spec.QueueDeclareOk)


def bind_stream(client: Any, name: str, exchanges: list[str], key: str) -> None:
    for exchange in exchanges:
        client.call(spec.QueueBind(queue=name, exchange=exchange, routing_key=key, channel=CH), spec.QueueBindOk)


def create_partitioned(client: Any, name: str, partitions: int, queue_args: dict[str, Any] | None = None) -> list[str]:
    """Declare the exchange, the partitions and their bindings; returns the partitions' names."""
    client.call(spec.ExchangeDeclare(exchange=name, type="direct", durable=True,
                                     arguments={"x-partitioned": True}, channel=CH), spec.ExchangeDeclareOk)
    names = []
    # in a cluster, the partitions' leaders spread over the nodes (the live node leading fewest queues)
    queue_args = {"x-queue-leader-locator": "balanced", **(queue_args or {})}
    for i in range(partitions):
        queue = f"{name}-{i}"
        create_stream(client, queue, queue_args)
        client.call(spec.QueueBind(queue=queue, exchange=name, routing_key=str(i), channel=CH), spec.QueueBindOk)
        names.append(queue)
    return names


def add_streams_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="streams_command", required=True, metavar="{create,create-partitioned}")
    one = sub.add_parser("create", help="create the stream NAME")
    one.add_argument("name", metavar="NAME")
    one.add_argument("--bind", action="append", default=[], metavar="EXCHANGE",
                     help="bind the stream to EXCHANGE (repeatable), e.g. amq.rabbitmq.trace")
    one.add_argument("--binding-key", default="#", metavar="KEY",
                     help="routing key of the --bind bindings (default %(default)s: everything on a topic exchange)")
    cp = sub.add_parser("create-partitioned", help="create a partitioned stream NAME-0..N-1 behind exchange NAME")
    cp.add_argument("name", metavar="NAME")
    cp.add_argument("--partitions", type=int, required=True, metavar="N")
    for p in (one, cp):
        p.add_argument("--amqp", default="127.0.0.1:5672", metavar="HOST:PORT", help="the broker (default %(default)s)")
        p.add_argument("--user", default="guest")
        p.add_argument("--password", default="guest")
        p.add_argument("--vhost", default="/")
        p.add_argument("--max-age", metavar="AGE", help="x-max-age of the stream(s), e.g. 7D")
        p.add_argument("--max-length-bytes", type=int, metavar="BYTES", help="x-max-length-bytes of the stream(s)")


def streams_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    partitioned = args.streams_command == "create-partitioned"
    if partitioned and args.partitions < 1:
        parser.error("--partitions must be at least 1")
    host, _, port = args.amqp.rpartition(":")
    if not port.isdigit():
        parser.error(f"--amqp must be HOST:PORT, got {args.amqp!r}")
    host = host or "127.0.0.1"
    queue_args: dict[str, Any] = {}
    if args.max_age:
        queue_args["x-max-age"] = args.max_age
    if args.max_length_bytes is not None:
        queue_args["x-max-length-bytes"] = args.max_length_bytes
    try:
        client = _Blocking(host, int(port), args.user, args.password, args.vhost, 10.0)
    except OSError as exc:
        print(f"{parser.prog}: error: cannot connect to the broker at {host}:{port}: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # the broker refused the login or the vhost
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    try:
        try:
            if partitioned:
                names = create_partitioned(client, args.name, args.partitions, queue_args)
            else:
                create_stream(client, args.name, queue_args)
                bind_stream(client, args.name, args.bind, args.binding_key)
        finally:
            client.close()
    except (OSError, RuntimeError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    if partitioned:
        print(f"partitioned stream '{args.name}': exchange '{args.name}' -> {', '.join(names)}")
    else:
        bound = "".join(f", bound to '{x}' with key '{args.binding_key}'" for x in args.bind)
        print(f"stream '{args.name}'{bound}")
    return 0
