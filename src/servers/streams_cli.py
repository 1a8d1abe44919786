"""``sansmq streams create-partitioned NAME --partitions N``: a partitioned stream (RabbitMQ's
"super stream") made over AMQP 0-9-1 on a running broker.

It declares a durable direct exchange NAME with argument ``x-partitioned: true`` (sansmq routes
such an exchange by routing-key hash: see ``engine.model.routers.PartitionRouter``), N durable
streams ``NAME-0`` .. ``NAME-<N-1>``, and binds partition i with routing key ``str(i)`` (RabbitMQ's
super stream layout). A producer publishes to the exchange with any routing key; readers read the
partitions in parallel. Running it again with the same arguments changes nothing.
"""

from __future__ import annotations

import argparse
import socket
from typing import Any

import amqpproto
from amqpproto import spec

__all__ = ["add_streams_arguments", "create_partitioned", "streams_command"]

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


def create_partitioned(client: Any, name: str, partitions: int, queue_args: dict[str, Any] | None = None) -> list[str]:
    """Declare the exchange, the partitions and their bindings; returns the partitions' names."""
    client.call(spec.ExchangeDeclare(exchange=name, type="direct", durable=True,
                                     arguments={"x-partitioned": True}, channel=CH), spec.ExchangeDeclareOk)
    names = []
    for i in range(partitions):
        queue = f"{name}-{i}"
        client.call(spec.QueueDeclare(queue=queue, durable=True,
                                      arguments={"x-queue-type": "stream", **(queue_args or {})}, channel=CH),
                    spec.QueueDeclareOk)
        client.call(spec.QueueBind(queue=queue, exchange=name, routing_key=str(i), channel=CH), spec.QueueBindOk)
        names.append(queue)
    return names


def add_streams_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="streams_command", required=True, metavar="{create-partitioned}")
    cp = sub.add_parser("create-partitioned", help="create a partitioned stream NAME-0..N-1 behind exchange NAME")
    cp.add_argument("name", metavar="NAME")
    cp.add_argument("--partitions", type=int, required=True, metavar="N")
    cp.add_argument("--amqp", default="127.0.0.1:5672", metavar="HOST:PORT", help="the broker (default %(default)s)")
    cp.add_argument("--user", default="guest")
    cp.add_argument("--password", default="guest")
    cp.add_argument("--vhost", default="/")
    cp.add_argument("--max-age", metavar="AGE", help="x-max-age of every partition, e.g. 7D")
    cp.add_argument("--max-length-bytes", type=int, metavar="BYTES", help="x-max-length-bytes of every partition")


def streams_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.partitions < 1:
        parser.error("--partitions must be at least 1")
    host, _, port = args.amqp.rpartition(":")
    queue_args: dict[str, Any] = {}
    if args.max_age:
        queue_args["x-max-age"] = args.max_age
    if args.max_length_bytes is not None:
        queue_args["x-max-length-bytes"] = args.max_length_bytes
    try:
        client = _Blocking(host or "127.0.0.1", int(port), args.user, args.password, args.vhost, 10.0)
        try:
            names = create_partitioned(client, args.name, args.partitions, queue_args)
        finally:
            client.close()
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"{parser.prog}: error: {exc}")
        return 1
    print(f"partitioned stream '{args.name}': exchange '{args.name}' -> {', '.join(names)}")
    return 0
