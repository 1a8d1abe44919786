"""Shared helpers for the engine simulation tests (imported by the test modules)."""

from __future__ import annotations

import random
from typing import Any

from amqpproto import spec
from engine import Broker, Config, MemoryStore, Store
from engine.testing import AmqpSimClient, SimClient, SimNetwork
from stompproto import Ack, Connected, Error, Message, Nack, Receipt, Send, Subscribe, Unsubscribe


def new_net(config: Config | None = None, store: Store | None = None, seed: int = 0, **kw: Any) -> SimNetwork:
    broker = Broker(config or Config(), store if store is not None else MemoryStore(), random.Random(seed))
    return SimNetwork(broker, seed=seed, **kw)


def connected(net: SimNetwork, version: str = "1.2", peer: tuple[Any, ...] | None = None,
              headers: dict[str, str] | None = None, **kw: Any) -> SimClient:
    client = net.connect(peer=peer, **kw)
    frame = client.stomp_connect(headers, version=version)
    assert isinstance(frame, Connected), frame
    client.events()
    return client


def amqp(net: SimNetwork) -> AmqpSimClient:
    """An AMQP client with its connection open and channel 1 open."""
    client = net.connect(protocol="amqp")
    assert isinstance(client, AmqpSimClient)
    assert isinstance(client.amqp_open(), spec.ConnectionOpenOk)
    assert isinstance(client.open_channel(1), spec.ChannelOpenOk)
    return client


def confirm_outcomes(client: AmqpSimClient, channel: int = 1) -> list[tuple[str, int]]:
    """The publisher confirms the client received on ``channel``, one (kind, sequence number) per
    message: a basic.ack/nack with multiple=true stands for every number since the last one."""
    out: list[tuple[str, int]] = []
    last = 0
    for e in client.received:
        if isinstance(e, (spec.BasicAck, spec.BasicNack)) and e.channel == channel:
            kind = "ack" if isinstance(e, spec.BasicAck) else "nack"
            first = last + 1 if e.multiple else e.delivery_tag
            out.extend((kind, n) for n in range(first, e.delivery_tag + 1))
            last = max(last, e.delivery_tag)
    return out


def subscribe(client: SimClient, dest: str, sub_id: str, ack: str = "auto", **headers: str) -> None:
    h = {"destination": dest, "id": sub_id, "ack": ack}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    client.send(Subscribe(h))


def send(client: SimClient, dest: str, body: bytes = b"", **headers: str) -> None:
    h = {"destination": dest}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    client.send(Send(h, body))


def unsubscribe(client: SimClient, sub_id: str, **headers: str) -> None:
    h = {"id": sub_id}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    client.send(Unsubscribe(h))


def messages(client: SimClient) -> list[Message]:
    """MESSAGE frames received since the last ``client.events()`` call (consumes the events)."""
    return [e for e in client.events() if isinstance(e, Message)]


def bodies(client: SimClient) -> list[bytes]:
    return [m.body for m in messages(client)]


def ack(client: SimClient, msg: Message, **headers: str) -> None:
    h = {"id": msg.headers["ack"]}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    client.send(Ack(h))


def nack(client: SimClient, msg: Message, **headers: str) -> None:
    h = {"id": msg.headers["ack"]}
    h.update({k.replace("_", "-"): v for k, v in headers.items()})
    client.send(Nack(h))


def receipts(client: SimClient) -> list[Receipt]:
    return [e for e in client.events() if isinstance(e, Receipt)]


def errors(client: SimClient) -> list[Error]:
    return [e for e in client.received if isinstance(e, Error)]
