"""Opt-in: the example client against a real RabbitMQ (SANSMQ_RABBITMQ=host:port).

Not part of CI; e.g. with the private node from ../shared/bench/brokers/rabbitmq-start.sh:
    SANSMQ_RABBITMQ=127.0.0.1:5682 .venv/bin/python -m pytest tests/amqpproto -m rabbitmq
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import sys
from pathlib import Path

import pytest

TARGET = os.environ.get("SANSMQ_RABBITMQ")
pytestmark = [pytest.mark.rabbitmq,
              pytest.mark.skipif(not TARGET, reason="opt-in: set SANSMQ_RABBITMQ=host:port to "
                                                    "run against a real RabbitMQ")]


def _example():
    path = Path(__file__).resolve().parents[2] / "examples" / "amqp_client.py"
    spec = importlib.util.spec_from_file_location("amqp_client_example", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["amqp_client_example"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_example_publishes_and_consumes():
    host, port = TARGET.rsplit(":", 1)
    bodies = asyncio.run(asyncio.wait_for(
        _example().run(host, int(port), count=20, big=300_000), 60))
    assert bodies[:20] == [f"message {i}".encode() for i in range(20)]
    assert bodies[20] == (bytes(range(256)) * (300_000 // 256) + b"!" * (300_000 % 256))


def test_soft_error_and_volume_against_rabbitmq():
    """RabbitMQ's own channel.close (404) arrives as a ChannelClose event; 2000 messages
    stream through one consumer with prefetch, frames batched arbitrarily by TCP."""
    import amqpproto as a

    ex = _example()
    host, port = TARGET.rsplit(":", 1)

    async def main():
        reader, writer = await asyncio.open_connection(host, int(port))
        c = ex.Client(reader, writer)
        await c.handshake("guest", "guest", "/")
        c.send(a.ChannelOpen(channel=1))
        await c.expect(a.ChannelOpenOk)
        c.send(a.QueueDeclare(queue="amqpproto-no-such-queue", passive=True, channel=1))
        with pytest.raises(ConnectionError, match="404"):
            await c.recv()  # the example answers the ChannelClose with ChannelCloseOk
        assert c.conn.channel_state(1) == "CH_CLOSED"
        c.send(a.ChannelOpen(channel=1))  # the channel number is free again
        await c.expect(a.ChannelOpenOk)
        c.send(a.QueueDeclare(queue="", exclusive=True, channel=1))
        q = (await c.expect(a.QueueDeclareOk)).queue
        for i in range(2000):
            c.send(a.BasicPublish(routing_key=q, body=b"%d" % i, channel=1,
                                  properties=a.BasicProperties(headers={"i": i})))
        c.send(a.BasicQos(prefetch_count=100, channel=1))
        await c.expect(a.BasicQosOk)
        c.send(a.BasicConsume(queue=q, channel=1))
        await c.expect(a.BasicConsumeOk)
        got = []
        while len(got) < 2000:
            d = await c.expect(a.BasicDeliver)
            got.append((d.properties.headers["i"], d.body))
            c.send(a.BasicAck(delivery_tag=d.delivery_tag, channel=1))
        await c.close()
        return got

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert got == [(i, b"%d" % i) for i in range(2000)]


def test_heartbeats_keep_an_idle_connection_alive():
    """heartbeat=1: idle for 4 s, our HeartbeatDue-driven heartbeats keep RabbitMQ happy
    (it drops a silent peer after two intervals) and its heartbeats reset our timer."""
    import amqpproto as a

    ex = _example()
    host, port = TARGET.rsplit(":", 1)

    async def main():
        reader, writer = await asyncio.open_connection(host, int(port))
        c = ex.Client(reader, writer, heartbeat=1)
        await c.handshake("guest", "guest", "/")
        assert c.conn.heartbeat == 1
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.recv(), 4)
        c.send(a.ChannelOpen(channel=1))
        await c.expect(a.ChannelOpenOk)
        await c.close()
        return c.heartbeats_sent

    assert asyncio.run(main()) >= 3
