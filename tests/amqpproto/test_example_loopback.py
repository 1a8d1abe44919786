"""The example client against a tiny broker built on the SERVER role, over real loopback
sockets: the server role drives a whole session (handshake, confirms, publish, consume,
deliver, ack, cancel, close) for a client written independently of it."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import amqpproto as a


def _example():
    path = Path(__file__).resolve().parents[2] / "examples" / "amqp_client.py"
    spec = importlib.util.spec_from_file_location("amqp_client_example_lb", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["amqp_client_example_lb"] = mod
    spec.loader.exec_module(mod)
    return mod


class MiniBroker:
    """One queue per declare, the default exchange only; enough for the example's script."""

    def __init__(self) -> None:
        self.queues: dict[str, list[tuple[a.BasicProperties, bytes]]] = {}
        self.seen: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = a.Connection(a.SERVER, frame_max=8192)  # small: forces multi-frame bodies
        confirms: dict[int, int] = {}
        consumers: dict[str, tuple[int, str]] = {}
        tag = 0
        while True:
            ev = conn.next_event()
            if ev is a.NEED_DATA:
                data = await reader.read(65536)
                conn.receive_data(data)
                continue
            if isinstance(ev, a.ConnectionClosed):
                break
            self.seen.append(type(ev).__name__)
            out = []
            if isinstance(ev, a.ProtocolHeader):
                out.append(a.ConnectionStart(server_properties={"product": "mini"},
                                             mechanisms=b"PLAIN AMQPLAIN", locales=b"en_US"))
            elif isinstance(ev, a.ConnectionStartOk):
                assert a.parse_sasl_response(ev.mechanism, ev.response) == ("guest", "guest")
                out.append(conn.tune())
            elif isinstance(ev, a.ConnectionOpen):
                out.append(a.ConnectionOpenOk())
            elif isinstance(ev, a.ChannelOpen):
                out.append(a.ChannelOpenOk(channel=ev.channel))
            elif isinstance(ev, a.ConfirmSelect):
                confirms[ev.channel] = 0
                out.append(a.ConfirmSelectOk(channel=ev.channel))
            elif isinstance(ev, a.QueueDeclare):
                name = ev.queue or f"amq.gen-{len(self.queues)}"
                self.queues.setdefault(name, [])
                out.append(a.QueueDeclareOk(name, len(self.queues[name]), 0, channel=ev.channel))
            elif isinstance(ev, a.BasicPublish):
                self.queues[ev.routing_key].append((ev.properties, ev.body))
                if ev.channel in confirms:
                    confirms[ev.channel] += 1
                    out.append(a.BasicAck(delivery_tag=confirms[ev.channel], channel=ev.channel))
            elif isinstance(ev, a.BasicQos):
                out.append(a.BasicQosOk(channel=ev.channel))
            elif isinstance(ev, a.BasicConsume):
                consumers[ev.consumer_tag] = (ev.channel, ev.queue)
                out.append(a.BasicConsumeOk(ev.consumer_tag, channel=ev.channel))
                for props, body in self.queues[ev.queue]:
                    tag += 1
                    out.append(a.BasicDeliver(ev.consumer_tag, tag, False, "", ev.queue, props,
                                              body, channel=ev.channel))
                self.queues[ev.queue].clear()
            elif isinstance(ev, a.BasicCancel):
                consumers.pop(ev.consumer_tag)
                out.append(a.BasicCancelOk(ev.consumer_tag, channel=ev.channel))
            elif isinstance(ev, a.ChannelClose):
                out.append(a.ChannelCloseOk(channel=ev.channel))
            elif isinstance(ev, a.ConnectionClose):
                out.append(a.ConnectionCloseOk())
            for o in out:
                writer.write(conn.send(o))
            await writer.drain()
            if conn.state == "CLOSED":
                break
        writer.close()


def test_example_against_server_role_over_loopback():
    broker = MiniBroker()

    async def main():
        server = await asyncio.start_server(broker.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await asyncio.wait_for(_example().run("127.0.0.1", port, count=7,
                                                         big=50_000), 30)

    bodies = asyncio.run(main())
    assert bodies[:7] == [f"message {i}".encode() for i in range(7)]
    assert len(bodies[7]) == 50_000
    assert broker.seen[-3:] == ["BasicCancel", "ChannelClose", "ConnectionClose"]
    assert "BasicAck" in broker.seen  # the client's multiple-ack arrived
