"""An AMQP 0-9-1 client on a plain blocking socket, using only amqpproto: log-in, confirms, consume, ack, heart-beats.

    python docs/examples/amqp_blocking.py [--host 127.0.0.1] [--port 5672] [--idle 30]
"""

from __future__ import annotations

import argparse
import math
import socket
import time
from typing import Any

import amqpproto as amqp


class AmqpClient:
    """One connection: the codec decides what the bytes mean, this class only moves them."""

    def __init__(self, sock: socket.socket, heartbeat: int) -> None:
        self.sock = sock
        self.conn = amqp.Connection(amqp.CLIENT, heartbeat=heartbeat)  # seconds we propose; tune-ok settles it
        self.clock = time.monotonic
        self.heartbeats_sent = 0

    def send(self, event: Any) -> None:
        self.sock.sendall(self.conn.send(event, now=self.clock()))  # `now` moves our heart-beat deadline

    def next_method(self, until: float = math.inf) -> Any:
        """The next method from the broker, or None at ``until`` (time.monotonic). Heart-beats are sent and
        checked here, on the codec's timer, for as long as we wait."""
        while True:
            event = self.conn.next_event()
            if event is amqp.NEED_DATA:
                timer, now = self.conn.get_timer(), self.clock()
                timer = math.inf if timer is None else timer
                if timer <= now:
                    self.conn.handle_timer(now)  # queues HeartbeatDue and/or PeerTimedOut
                    continue
                if until <= now:
                    return None
                wake = min(timer, until)
                self.sock.settimeout(None if wake == math.inf else wake - now)
                try:
                    data = self.sock.recv(65536)
                except TimeoutError:
                    continue  # a deadline passed: handled at the top of the loop
                self.conn.receive_data(data, now=self.clock())  # b"" (EOF) becomes ConnectionClosed
            elif isinstance(event, amqp.HeartbeatDue):
                self.send(amqp.Heartbeat())
                self.heartbeats_sent += 1
            elif isinstance(event, amqp.PeerTimedOut | amqp.ConnectionClosed):
                raise ConnectionError(f"connection lost: {type(event).__name__}")
            elif isinstance(event, amqp.ConnectionClose | amqp.ChannelClose):  # the broker refused something
                self.send(amqp.ConnectionCloseOk() if isinstance(event, amqp.ConnectionClose)
                          else amqp.ChannelCloseOk(channel=event.channel))
                raise ConnectionError(f"{event.reply_code} {event.reply_text}")
            elif isinstance(event, amqp.Method):
                return event  # (the broker's Heartbeat events need nothing: receive_data noted them)

    def call(self, method: Any, reply: type) -> Any:
        """Send a synchronous method and wait for its answer."""
        self.send(method)
        answer = self.next_method()
        assert isinstance(answer, reply), answer
        return answer


def main(host: str, port: int, queue: str, count: int, heartbeat: int, idle: float) -> None:
    client = AmqpClient(socket.create_connection((host, port)), heartbeat=heartbeat)
    start = client.call(amqp.ProtocolHeader(), amqp.ConnectionStart)
    tune = client.call(client.conn.start_ok(start, "guest", "guest", "docs example"), amqp.ConnectionTune)
    client.send(client.conn.tune_ok(tune))  # negotiates frame_max, channel_max and the heart-beat
    client.call(amqp.ConnectionOpen(virtual_host="/"), amqp.ConnectionOpenOk)
    print(f"connected: AMQP 0-9-1, heart-beat {client.conn.heartbeat} s")

    client.call(amqp.ChannelOpen(channel=1), amqp.ChannelOpenOk)
    client.call(amqp.ConfirmSelect(channel=1), amqp.ConfirmSelectOk)
    client.call(amqp.QueueDeclare(queue=queue, exclusive=True, channel=1), amqp.QueueDeclareOk)
    persistent = amqp.BasicProperties(content_type="text/plain", delivery_mode=2)
    for i in range(count):
        client.send(amqp.BasicPublish(routing_key=queue, properties=persistent, body=f"message {i}".encode(),
                                      channel=1))
    confirmed = 0
    while confirmed < count:  # one basic.ack per message, or one covering several (multiple)
        ack = client.next_method()
        assert isinstance(ack, amqp.BasicAck), ack  # a basic.nack would mean the broker lost it
        confirmed = ack.delivery_tag if ack.multiple else confirmed + 1
    print(f"published {count} messages, all confirmed")

    client.call(amqp.BasicQos(prefetch_count=count, channel=1), amqp.BasicQosOk)
    client.call(amqp.BasicConsume(queue=queue, consumer_tag="docs", channel=1), amqp.BasicConsumeOk)
    for _ in range(count):
        delivery = client.next_method()
        assert isinstance(delivery, amqp.BasicDeliver)
        print(f"received {delivery.body.decode()!r}")
        client.send(amqp.BasicAck(delivery_tag=delivery.delivery_tag, channel=1))

    before = client.heartbeats_sent  # wait for a message that does not come: heart-beats keep us connected
    assert client.next_method(until=client.clock() + idle) is None
    print(f"idle {idle:g} s: {client.heartbeats_sent - before} heart-beats sent")

    client.call(amqp.ChannelClose(amqp.REPLY_SUCCESS, "done", channel=1), amqp.ChannelCloseOk)
    client.call(amqp.ConnectionClose(amqp.REPLY_SUCCESS, "bye"), amqp.ConnectionCloseOk)
    client.sock.close()
    print("closed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5672)
    parser.add_argument("--queue", default="docs-amqp-blocking")
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--heartbeat", type=int, default=1, help="heart-beat period to propose, in seconds")
    parser.add_argument("--idle", type=float, default=3.0, help="seconds to wait idle at the end")
    args = parser.parse_args()
    main(args.host, args.port, args.queue, args.count, args.heartbeat, args.idle)
