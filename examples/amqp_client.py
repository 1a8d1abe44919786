"""A small asyncio AMQP 0-9-1 publisher/consumer built on amqpproto (client role).

    python examples/amqp_client.py [--host 127.0.0.1] [--port 5672] [--count 10]

It logs in (SASL PLAIN, guest/guest by default), negotiates tuning and heartbeats, opens a
channel in publisher-confirm mode, declares an exclusive server-named queue, publishes
``--count`` messages through the default exchange waiting for the broker's confirms, consumes
them back, acks them with one multiple-ack, and closes everything politely.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

try:
    import amqpproto as a
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    import amqpproto as a


class Client:
    """Glue between an asyncio stream pair and an amqpproto.Connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 heartbeat: int = 30) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = a.Connection(a.CLIENT, heartbeat=heartbeat)
        self.heartbeats_sent = 0
        self.loop = asyncio.get_running_loop()

    def send(self, event: object) -> None:
        self.writer.write(self.conn.send(event, now=self.loop.time()))

    async def recv(self) -> object:
        """Next protocol event; heartbeats are answered here, not returned."""
        while True:
            ev = self.conn.next_event()
            if ev is a.NEED_DATA:
                deadline = self.conn.get_timer()
                timeout = None if deadline is None else max(0.0, deadline - self.loop.time())
                try:
                    data = await asyncio.wait_for(self.reader.read(65536), timeout)
                except TimeoutError:
                    self.conn.handle_timer(self.loop.time())
                    continue
                self.conn.receive_data(data, now=self.loop.time())
                continue
            if isinstance(ev, a.HeartbeatDue):
                self.send(a.Heartbeat())
                self.heartbeats_sent += 1
            elif isinstance(ev, a.PeerTimedOut):
                raise ConnectionError("broker stopped sending heartbeats")
            elif isinstance(ev, a.ConnectionClosed):
                raise ConnectionError("broker closed the socket")
            elif isinstance(ev, a.ConnectionClose):
                self.send(a.ConnectionCloseOk())
                raise ConnectionError(f"broker closed the connection: {ev.reply_code} "
                                      f"{ev.reply_text}")
            elif isinstance(ev, a.ChannelClose):
                self.send(a.ChannelCloseOk(channel=ev.channel))
                raise ConnectionError(f"broker closed channel {ev.channel}: {ev.reply_code} "
                                      f"{ev.reply_text}")
            elif not isinstance(ev, a.Heartbeat):
                return ev

    async def expect(self, cls: type) -> object:
        ev = await self.recv()
        if not isinstance(ev, cls):
            raise RuntimeError(f"expected {cls.__name__}, got {ev!r}")
        return ev

    async def handshake(self, user: str, password: str, vhost: str) -> None:
        self.send(a.ProtocolHeader())
        start = await self.expect(a.ConnectionStart)
        assert b"PLAIN" in start.mechanisms.split()
        self.send(a.ConnectionStartOk(
            client_properties={"product": "amqpproto example",
                               "capabilities": {"publisher_confirms": True,
                                                "consumer_cancel_notify": True}},
            mechanism="PLAIN", response=a.plain_response(user, password)))
        tune = await self.expect(a.ConnectionTune)
        self.send(self.conn.tune_ok(tune))
        self.send(a.ConnectionOpen(virtual_host=vhost))
        await self.expect(a.ConnectionOpenOk)

    async def close(self) -> None:
        self.send(a.ConnectionClose(a.REPLY_SUCCESS, "bye"))
        while not isinstance(await self.recv(), a.ConnectionCloseOk):
            pass  # deliveries still in flight are dropped, as the spec says
        self.writer.close()
        await self.writer.wait_closed()


async def run(host: str, port: int, count: int = 10, user: str = "guest",
              password: str = "guest", vhost: str = "/", big: int = 0) -> list[bytes]:
    """Publish ``count`` messages (plus one of ``big`` bytes, split into several body frames,
    if ``big``), consume them back; returns the bodies received."""
    reader, writer = await asyncio.open_connection(host, port)
    c = Client(reader, writer)
    await c.handshake(user, password, vhost)
    ch = 1
    c.send(a.ChannelOpen(channel=ch))
    await c.expect(a.ChannelOpenOk)
    c.send(a.ConfirmSelect(channel=ch))
    await c.expect(a.ConfirmSelectOk)
    c.send(a.QueueDeclare(queue="", exclusive=True, auto_delete=True, channel=ch))
    queue = (await c.expect(a.QueueDeclareOk)).queue

    sent = [f"message {i}".encode() for i in range(count)]
    if big:
        sent.append(bytes(range(256)) * (big // 256) + b"!" * (big % 256))
        count += 1
    for body in sent:
        c.send(a.BasicPublish(exchange="", routing_key=queue, body=body, channel=ch,
                              properties=a.BasicProperties(content_type="text/plain",
                                                           delivery_mode=1)))
    confirmed = 0
    while confirmed < count:  # confirms may come one by one or as multiple-acks
        ack = await c.recv()
        if isinstance(ack, a.BasicNack):
            raise RuntimeError(f"broker nacked {ack.delivery_tag}")
        if isinstance(ack, a.BasicAck):
            confirmed = ack.delivery_tag if ack.multiple else confirmed + 1

    c.send(a.BasicQos(prefetch_count=count, channel=ch))
    await c.expect(a.BasicQosOk)
    c.send(a.BasicConsume(queue=queue, consumer_tag="example", channel=ch))
    await c.expect(a.BasicConsumeOk)
    received: list[bytes] = []
    last_tag = 0
    while len(received) < count:
        d = await c.expect(a.BasicDeliver)
        received.append(d.body)
        last_tag = d.delivery_tag
    c.send(a.BasicAck(delivery_tag=last_tag, multiple=True, channel=ch))
    c.send(a.BasicCancel(consumer_tag="example", channel=ch))
    await c.expect(a.BasicCancelOk)
    c.send(a.ChannelClose(a.REPLY_SUCCESS, "done", channel=ch))
    await c.expect(a.ChannelCloseOk)
    await c.close()
    return received


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5672)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--user", default="guest")
    ap.add_argument("--password", default="guest")
    ap.add_argument("--big", type=int, default=0, help="also send one message of this size")
    args = ap.parse_args()
    bodies = asyncio.run(run(args.host, args.port, args.count, args.user, args.password,
                             big=args.big))
    for b in bodies:
        print(b.decode() if len(b) < 80 else f"<{len(b)} bytes>")
    print(f"published, confirmed, consumed and acked {len(bodies)} messages")


if __name__ == "__main__":
    main()
